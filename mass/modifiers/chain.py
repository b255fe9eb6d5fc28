"""Kind ``chain``: registered modifiers applied one after the other."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mass.modifiers.base import build, register_modifier


@dataclass(frozen=True)
class ChainSpec:
    """Registered modifiers applied one after the other: ``((kind, spec dict), ...)``."""

    parts: tuple[tuple[str, dict], ...]

    @property
    def dim(self) -> int:
        return int(self.parts[0][1]["dim"])

    def to_dict(self) -> dict:
        return {"parts": [{"kind": k, "spec": dict(s)} for k, s in self.parts]}


@register_modifier("chain")
class ChainModifier(nn.Module):
    """x' = G_k(... G_1(x)): e.g. a closed-form eraser fitted first, then a trained MaSS G
    (adaptive ``pre_erase``). Saved, exported and served like any single modifier."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> ChainSpec:
        return ChainSpec(tuple((p["kind"], dict(p["spec"])) for p in d["parts"]))

    def __init__(self, spec: ChainSpec) -> None:
        super().__init__()
        self.spec = spec
        self.parts = nn.ModuleList(build(k, s, where="chain part") for k, s in spec.parts)

    @classmethod
    def of(cls, *modules: nn.Module) -> ChainModifier:
        spec = ChainSpec(tuple((m.kind, m.spec.to_dict()) for m in modules))  # type: ignore[attr-defined]
        chain = cls(spec)
        for mine, theirs in zip(chain.parts, modules, strict=True):
            mine.load_state_dict(theirs.state_dict())
        return chain.eval()

    @property
    def stochastic(self) -> bool:
        return any(getattr(p, "stochastic", False) for p in self.parts)

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        for part in self.parts:
            x = part(x, seeds)
        return x
