"""Kind ``quadratic_erasure``: LEACE's quadratic eraser with a stored class predictor.

Per erased attribute i: predict the class c = argmax(A_i x + a_i) (the served model never sees
labels), then transport x <- (x - mu_c) T_c^T + mu, the class-conditional Gaussian moved to the
barycenter. Fitted by :class:`mass.methods.leace.LeaceQuadratic`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import l2_normalize, register_modifier


@dataclass(frozen=True)
class QuadraticSpec:
    dim: int
    classes: tuple[int, ...]  # number of classes of each erased attribute, in erasure order

    def to_dict(self) -> dict:
        d = asdict(self)
        d["classes"] = list(self.classes)
        return d


@register_modifier("quadratic_erasure")
class QuadraticErasureModifier(nn.Module):
    """Per attribute: predict class c = argmax(A x + a), then x <- (x - mu_c) T_c^T + mu."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> QuadraticSpec:
        return QuadraticSpec(dim=int(d["dim"]), classes=tuple(int(k) for k in d["classes"]))

    stochastic = False  # draws no noise; export.json records it, so no key is required

    def __init__(self, spec: QuadraticSpec) -> None:
        super().__init__()
        self.spec = spec
        d = spec.dim
        for i, k in enumerate(spec.classes):
            self.register_buffer(f"means_{i}", torch.zeros(k, d))
            self.register_buffer(f"center_{i}", torch.zeros(d))
            self.register_buffer(f"maps_{i}", torch.eye(d).repeat(k, 1, 1))
            self.register_buffer(f"pred_w_{i}", torch.zeros(k, d))
            self.register_buffer(f"pred_b_{i}", torch.zeros(k))

    def erase_one(self, i: int, x: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        means, maps = getattr(self, f"means_{i}"), getattr(self, f"maps_{i}")
        out = torch.empty_like(x)
        for c in range(self.spec.classes[i]):  # k small; avoids an [N, d, d] gather
            rows = cls == c
            out[rows] = (x[rows] - means[c]) @ maps[c].T + getattr(self, f"center_{i}")
        return out

    def predict(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return (x @ getattr(self, f"pred_w_{i}").T + getattr(self, f"pred_b_{i}")).argmax(dim=1)

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        x = l2_normalize(x)
        for i in range(len(self.spec.classes)):
            x = self.erase_one(i, x, self.predict(i, x))
        return l2_normalize(x)
