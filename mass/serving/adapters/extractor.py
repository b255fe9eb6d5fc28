"""Triton adapter for the image extractor: IMAGE UINT8 [2352] -> EMBEDDING FP32 [128]."""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from mass.serving.adapters._common import as_tensor, input_dtype, output_dtype, run_batched, setup
from mass.serving.contract import EMBEDDING, IMAGE


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config, version_dir, meta, self.device = setup(args)
        from mass.demo.extractor import load_extractor  # after the checksum check (imports torch)

        self.model = load_extractor(str(version_dir / meta["weights"])).to(self.device)
        self.in_dim = int(meta["input_dim"])
        self.in_dtype = input_dtype(config, IMAGE)
        self.out_dtype = output_dtype(config, EMBEDDING)

    def _read(self, request) -> tuple[np.ndarray]:
        images = pb_utils.get_input_tensor_by_name(request, IMAGE).as_numpy()
        if images.ndim != 2 or images.shape[1] != self.in_dim:
            raise ValueError(f"IMAGE has shape {list(images.shape)}; needs [N, {self.in_dim}]")
        return (images.astype(self.in_dtype, copy=False),)

    def _compute(self, images: np.ndarray) -> np.ndarray:
        return self.model(as_tensor(images).to(self.device)).cpu().numpy()

    def _write(self, emb: np.ndarray):
        out = pb_utils.Tensor(EMBEDDING, emb.astype(self.out_dtype, copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def execute(self, requests):
        return run_batched(requests, self._read, self._compute, self._write)
