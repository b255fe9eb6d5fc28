"""LEACE of what the preserved attributes do not explain (a calibration candidate).

Plain LEACE removes every direction that covaries with the suppressed attribute, so when a
preserved attribute R correlates with S it takes R's directions too, although the audit
allows an attacker to read S up to the leakage floor (what R's labels alone give away). This
variant erases the *residual* concept Z = onehot(S) - E[onehot(S) | R] (cell means over the
combinations of preserved labels): afterwards no linear function of x' covaries with the part
of S that R does not determine, while the directions of R stay. Without preserved attributes
it is plain LEACE. Stored as the ``affine`` modifier kind like ``leace``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from mass.io import EmbeddingDataset
from mass.methods import FitResult, register_method
from mass.methods._common import AffineModifier, AffineSpec, param
from mass.methods.leace import _Base, leace_affine, one_hot_codes


def residual_codes(codes: torch.Tensor, preserved: dict[str, np.ndarray]) -> torch.Tensor:
    """``codes`` minus their mean within each combination of preserved labels."""
    if not preserved:
        return codes
    cols = np.stack([np.asarray(v) for v in preserved.values()], axis=1)
    cell = torch.as_tensor(np.unique(cols, axis=0, return_inverse=True)[1].reshape(-1))
    n_cells = int(cell.max()) + 1
    sums = torch.zeros(n_cells, codes.shape[1], dtype=codes.dtype).index_add_(0, cell, codes)
    counts = torch.bincount(cell, minlength=n_cells).to(codes.dtype).clamp(min=1)
    return codes - (sums / counts[:, None])[cell]


@register_method("leace_conditional")
class LeaceConditional(_Base):
    """``params``: ``shrinkage`` (bool, default True)."""

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: dict[str, Any],
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> FitResult:
        start = time.perf_counter()
        x, labels, ks = self._setup(train, suppress, preserve)
        codes = residual_codes(one_hot_codes(labels, ks),
                               {r: train.labels[r] for r in preserve})  # fmt: skip
        weight, bias = leace_affine(x, codes, shrinkage=param(params, "shrinkage", True))
        modifier = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
        rank = int(torch.linalg.matrix_rank(torch.eye(x.shape[1]) - weight, atol=1e-4))
        return FitResult(
            modifier=modifier, seconds=time.perf_counter() - start, extra={"erased_rank": rank}
        )
