"""The data modifier G of MaSS (eq. 1), optionally stochastic (beyond the paper).

G(x) = n(x + n(MLP([x, z]))) where n() is L2 normalisation with n(0) = 0, inputs are
L2-normalised first, and z is per-row noise seeded from the row id (``noise_dim`` > 0 only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.errors import UnreadableInputError
from mass.noise import row_noise
from mass.safe_load import load_checkpoint, plain


def l2_normalize(v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """n(v) of eq. 1: v / ||v||, and exactly 0 where ||v|| == 0 (no NaN, no gradient blow-up)."""
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    safe = torch.where(norm > eps, norm, torch.ones_like(norm))
    return torch.where(norm > eps, v / safe, torch.zeros_like(v))


@dataclass(frozen=True)
class ModifierSpec:
    """Architecture of G; stored with the weights so export and serving rebuild it exactly."""

    dim: int
    hidden: tuple[int, ...] = (256, 128, 256)
    noise_dim: int = 0
    noise_scale: float = 1.0
    # x' = n(x + a * n(MLP)); a = 1 is eq. 1. a > 1 (adaptive mode) lets G outweigh x, which
    # eq. 1 cannot: with a = 1, x' always lies within 90 degrees of x.
    residual_scale: float = 1.0
    # x' = n(G(x) + sigma * z(seed) / sqrt(d)): release-time noise of norm ~sigma, seeded
    # from the row id (adaptive mode). It drowns the low-variance residue of s that a
    # standardising non-linear attacker would otherwise amplify. 0 = eq. 1 exactly.
    output_noise: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModifierSpec:
        return cls(
            dim=int(d["dim"]),
            hidden=tuple(int(h) for h in d.get("hidden", (256, 128, 256))),
            noise_dim=int(d.get("noise_dim", 0)),
            noise_scale=float(d.get("noise_scale", 1.0)),
            residual_scale=float(d.get("residual_scale", 1.0)),
            output_noise=float(d.get("output_noise", 0.0)),
        )


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


MODIFIER_KINDS: dict[str, type[nn.Module]] = {}


def register_modifier(kind: str):
    """Class decorator: make a modifier class rebuildable by :func:`load_modifier`.

    A registered class takes one ``spec`` argument, exposes it as ``self.spec`` with
    ``to_dict()``, has a classmethod ``spec_from_dict(d)``, and implements
    ``forward(x: float32[N, d], seeds: int64[N] | None = None) -> float32[N, d]``.
    """

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if kind in MODIFIER_KINDS and MODIFIER_KINDS[kind] is not cls:
            raise ValueError(f"modifier kind {kind!r} registered twice")
        MODIFIER_KINDS[kind] = cls
        cls.kind = kind  # type: ignore[attr-defined]
        return cls

    return wrap


@register_modifier("mass")
class DataModifier(nn.Module):
    """x' = G(x) = n(x + n(MLP(x))) (eq. 1); with ``noise_dim`` the MLP also sees z(seed)."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> ModifierSpec:
        return ModifierSpec.from_dict(d)

    def __init__(self, spec: ModifierSpec) -> None:
        super().__init__()
        self.spec = spec
        self.mlp = mlp([spec.dim + spec.noise_dim, *spec.hidden, spec.dim])

    @property
    def stochastic(self) -> bool:
        return self.spec.noise_dim > 0 or self.spec.output_noise > 0

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        x = l2_normalize(x)
        if self.stochastic and seeds is None:
            raise ValueError("stochastic modifier needs per-row seeds (mass.noise.keyed_row_seeds)")
        if self.spec.noise_dim > 0:
            z = row_noise(seeds, self.spec.noise_dim).to(x.device) * self.spec.noise_scale
            h = self.mlp(torch.cat([x, z], dim=1))
        else:
            h = self.mlp(x)
        out = l2_normalize(x + self.spec.residual_scale * l2_normalize(h))
        if self.spec.output_noise > 0:
            # a different stream than the input noise: offset the seed
            z = row_noise(seeds + 0x5EED, self.spec.dim).to(x.device)
            out = l2_normalize(out + self.spec.output_noise * z / self.spec.dim**0.5)
        return out


def save_modifier(model: nn.Module, path: str, **extra: object) -> None:
    """Save any registered modifier with its kind and spec, plus JSON-able ``extra`` metadata."""
    kind = getattr(model, "kind", None)
    if kind not in MODIFIER_KINDS:
        raise ValueError(f"{type(model).__name__} is not a registered modifier kind")
    spec = plain(model.spec.to_dict(), where=f"{kind} spec")
    blob = {"kind": kind, "spec": spec, "state_dict": model.state_dict()}
    torch.save({**blob, "meta": plain(dict(extra), where="modifier metadata")}, path)


def load_modifier(path: str) -> nn.Module:
    """Rebuild a modifier saved by :func:`save_modifier` (RUN_DIR/modifier.pt), in eval mode."""
    import mass.methods  # noqa: F401  (registers every method's modifier kinds)

    blob = _read(path)
    kind = blob.get("kind", "mass")
    if kind not in MODIFIER_KINDS:
        raise ValueError(f"{path}: unknown modifier kind {kind!r}; known: {sorted(MODIFIER_KINDS)}")
    cls = MODIFIER_KINDS[kind]
    model = cls(cls.spec_from_dict(blob["spec"]))  # type: ignore[attr-defined]
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def modifier_meta(path: str) -> dict:
    """The ``extra`` metadata stored by :func:`save_modifier` (method, suppress, preserve, ...)."""
    return dict(_read(path).get("meta") or {})


def _read(path: str) -> dict:
    """The saved dict, loaded without pickle (:mod:`mass.safe_load`)."""
    remedy = "re-train the run (`mass train`) to write a fresh modifier.pt"
    blob = load_checkpoint(path, what="modifier", remedy=remedy)
    if not isinstance(blob, dict) or "state_dict" not in blob or "spec" not in blob:
        raise UnreadableInputError(f"{path}: not a modifier saved by `mass train`; {remedy}")
    return blob


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
        self.parts = nn.ModuleList(
            MODIFIER_KINDS[k](MODIFIER_KINDS[k].spec_from_dict(s))  # type: ignore[attr-defined]
            for k, s in spec.parts
        )

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
