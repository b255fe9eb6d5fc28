"""Triton adapter for a data modifier: EMBEDDING FP32 [d] + ROW_SEED INT64 [1] -> PRIVATIZED."""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from mass.serving.adapters._common import as_tensor, input_dtype, output_dtype, run_batched, setup
from mass.serving.contract import EMBEDDING, PRIVATIZED, ROW_SEED


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config, version_dir, meta, self.device = setup(args)
        from mass.modifiers import load_modifier  # after the checksum check (imports torch)

        self.model = load_modifier(str(version_dir / meta["weights"])).to(self.device)
        self.dim = int(meta["dim"])
        self.emb_dtype = input_dtype(config, EMBEDDING)
        self.out_dtype = output_dtype(config, PRIVATIZED)

    def _read(self, request) -> tuple[np.ndarray, np.ndarray]:
        x = pb_utils.get_input_tensor_by_name(request, EMBEDDING).as_numpy()
        seeds = pb_utils.get_input_tensor_by_name(request, ROW_SEED).as_numpy()
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(
                f"EMBEDDING has shape {list(x.shape)}; this model needs [N, {self.dim}]"
            )
        seeds = seeds.reshape(-1)
        if len(seeds) != len(x):
            raise ValueError(f"ROW_SEED has {len(seeds)} rows but EMBEDDING has {len(x)}")
        if not np.isfinite(x).all():
            raise ValueError("EMBEDDING contains NaN or Inf; clean the input rows")
        return x.astype(self.emb_dtype, copy=False), seeds

    def _compute(self, x: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        x_t, seeds_t = as_tensor(x).to(self.device), as_tensor(seeds).to(self.device)
        return self.model(x_t, seeds_t).cpu().numpy()

    def _write(self, y: np.ndarray):
        out = pb_utils.Tensor(PRIVATIZED, y.astype(self.out_dtype, copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def execute(self, requests):
        return run_batched(requests, self._read, self._compute, self._write)

    def finalize(self) -> None:
        self.model = None
