"""LEACE repeated through the renormalisation, optionally only for what R does not explain.

Two gaps between plain ``leace`` and a release that retrained attackers cannot read:

- Every release is L2-renormalised (the ``affine`` kind ends with n()). LEACE leaves no linear
  information about S in W x + b, but the row norm of W x + b still differs by class, and
  dividing by it writes S back into the directions (measured on synthetic data:
  docs/calibration.md, "Search order", ``leace x3``).
  This method fits LEACE again on its own renormalised output, ``rounds`` times, and serves the
  rounds as one ``chain`` of ``affine`` modifiers.
- With ``given_preserved`` (default), the concept erased is Z = onehot(S) - E[onehot(S) | R]
  (cell means over the combinations of preserved labels) instead of onehot(S): plain LEACE
  removes every direction that covaries with S, R's included when R and S correlate, although
  the audit lets an attacker read S up to the leakage floor (what R's labels alone give away).
  Afterwards no linear function of x' covaries with the part of S that R does not determine,
  and R's directions stay. Without preserved attributes it is plain LEACE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mass.methods import FitResult, Method, Params, register_method
from mass.methods.base import knob
from mass.methods.leace import erasure_inputs, leace_affine, one_hot_codes
from mass.modifiers import AffineModifier, AffineSpec, ChainModifier
from mass.rows import joint_codes


def residual_codes(codes: torch.Tensor, preserved: dict[str, np.ndarray]) -> torch.Tensor:
    """``codes`` minus their mean within each combination of preserved labels."""
    if not preserved:
        return codes
    cell = torch.as_tensor(joint_codes(preserved))
    n_cells = int(cell.max()) + 1
    sums = torch.zeros(n_cells, codes.shape[1], dtype=codes.dtype).index_add_(0, cell, codes)
    counts = torch.bincount(cell, minlength=n_cells).to(codes.dtype).clamp(min=1)
    return codes - (sums / counts[:, None])[cell]


def erasure_concept(train, suppress: list[str], preserve: list[str], given_preserved: bool):
    """(unit x, the concept LEACE erases): onehot(S), less its mean within each combination
    of preserved labels when ``given_preserved`` (the module docstring)."""
    x, labels, ks = erasure_inputs(train, suppress, preserve)
    codes = one_hot_codes(labels, ks)
    if given_preserved:
        codes = residual_codes(codes, {r: train.labels[r] for r in preserve})
    return x, codes


@dataclass(frozen=True)
class IteratedParams(Params):
    rounds: int = knob(3, lo=1, help="LEACE fits, each on the previous renormalised output")
    given_preserved: bool = knob(True, help="erase only what the preserved labels do not explain")
    shrinkage: bool = knob(True, help="shrink the covariance estimate (concept-erasure)")


@register_method("leace_iterated")
class LeaceIterated(Method):
    """LEACE repeated through the renormalisation, served as a chain of affine modifiers."""

    Params = IteratedParams

    def fit_params(self, train, p: IteratedParams, *, suppress, preserve, val, progress, **_):
        x, codes = erasure_concept(train, suppress, preserve, p.given_preserved)
        parts = []
        for _ in range(p.rounds):
            weight, bias = leace_affine(x, codes, shrinkage=p.shrinkage)
            part = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
            parts.append(part)
            with torch.no_grad():
                x = part(x)
        modifier = parts[0] if len(parts) == 1 else ChainModifier.of(*parts)
        return FitResult(modifier=modifier.eval(),
                         extra={"rounds": p.rounds, "given_preserved": p.given_preserved})  # fmt: skip
