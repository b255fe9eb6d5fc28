"""What every servable modifier shares: n() of eq. 1 (torch and numpy), the MLP builder and the
registry of modifier kinds that :func:`mass.modifiers.load_modifier` rebuilds by name.

Torch-only; nothing here knows how a modifier is fitted (that is :mod:`mass.methods`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["MODIFIER_KINDS", "build", "fitted_state", "l2_normalize", "mlp", "modify",
           "register_modifier"]  # fmt: skip


def l2_normalize(v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """n(v) of eq. 1: v / ||v||, and exactly 0 where ||v|| == 0 (no NaN, no gradient blow-up)."""
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    safe = torch.where(norm > eps, norm, torch.ones_like(norm))
    return torch.where(norm > eps, v / safe, torch.zeros_like(v))


def fitted_state(values: Any) -> dict[str, torch.Tensor]:
    """A fitted-values dataclass's tensors by buffer name, the unset (``None``) ones left out;
    not copied (``dataclasses.asdict`` would deep-copy every tensor)."""
    named = ((f.name, getattr(values, f.name)) for f in fields(values))
    return {name: v for name, v in named if v is not None}


def mlp(sizes: list[int], *, batchnorm: bool = False) -> nn.Sequential:
    """Linear layers with ReLU (and optionally BatchNorm) between them, none after the last."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            if batchnorm:
                layers.append(nn.BatchNorm1d(b))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# kind name -> class. The names are stored in every modifier.pt and export.json ("kind"):
# renaming one makes existing runs and signed exports unloadable.
MODIFIER_KINDS: dict[str, type[nn.Module]] = {}


def register_modifier(kind: str):
    """Class decorator: make a modifier class rebuildable by :func:`load_modifier`.

    A registered class takes one ``spec`` argument, exposes it as ``self.spec`` with
    ``to_dict()``, has a classmethod ``spec_from_dict(d)``, a ``stochastic`` attribute (does
    the output depend on ROW_SEED?) and implements
    ``forward(x: float32[N, d], seeds: int64[N] | None = None) -> float32[N, d]``.
    """

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if kind in MODIFIER_KINDS and MODIFIER_KINDS[kind] is not cls:
            raise ValueError(f"modifier kind {kind!r} registered twice")
        MODIFIER_KINDS[kind] = cls
        cls.kind = kind  # type: ignore[attr-defined]
        return cls

    return wrap


def build(kind: str, spec: dict, *, where: str = "modifier") -> nn.Module:
    """A fresh (untrained) modifier of registered ``kind`` from its spec dict."""
    if kind not in MODIFIER_KINDS:
        raise ValueError(
            f"{where}: unknown modifier kind {kind!r}; known: {sorted(MODIFIER_KINDS)}"
        )
    cls = MODIFIER_KINDS[kind]
    return cls(cls.spec_from_dict(spec))  # type: ignore[attr-defined]


def modify(model: nn.Module, x: np.ndarray, seeds: np.ndarray, *, batch: int = 4096) -> np.ndarray:
    """Apply a fitted modifier to numpy rows in batches (eval mode, no grad)."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            xb = torch.as_tensor(x[i : i + batch], dtype=torch.float32)
            out.append(model(xb, torch.as_tensor(seeds[i : i + batch])).numpy())
    return np.concatenate(out) if out else np.zeros_like(x)
