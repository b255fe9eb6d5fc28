"""The branch networks of MaSS and their file, RUN_DIR/branches.pt: no training here.

Per-attribute classifiers (App. B.2) and the agnostic model (B.1), frozen after pretraining
(:mod:`mass.branches` trains them). The audit loads them as frozen judges through
:mod:`mass.rundir`, so this module imports nothing of the training stack.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from mass.errors import UnreadableInputError
from mass.safe_load import load_checkpoint

_M = TypeVar("_M", bound=nn.Module)


class AttributeClassifier(nn.Module):
    """d-512-256-C MLP with BatchNorm + ReLU (App. B.2); ``forward`` returns (z, logits)."""

    def __init__(self, dim: int, num_classes: int, *, widths: tuple[int, int] = (512, 256)):
        super().__init__()
        self.dim, self.num_classes, self.widths = dim, num_classes, tuple(widths)
        a, b = widths
        self.features = nn.Sequential(
            nn.Linear(dim, a), nn.BatchNorm1d(a), nn.ReLU(),
            nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(b, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.features(x)
        return z, self.head(z)


class AgnosticModel(nn.Module):
    """Encoder (FC d-d, BN, ReLU, FC d-d) + MLP projector (App. B.1); returns (h, p)."""

    def __init__(self, dim: int, *, proj_dim: int = 128):
        super().__init__()
        self.dim, self.proj_dim = dim, proj_dim
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU(),
                                     nn.Linear(dim, dim))  # fmt: skip
        self.projector = nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU(),
                                       nn.Linear(dim, proj_dim))  # fmt: skip

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x)
        return h, self.projector(h)


def freeze(model: _M) -> _M:
    """Eval mode (BatchNorm uses running stats) and no parameter takes gradients."""
    model.eval()
    for p in model.parameters():
        p.grad = None  # drop pretraining's last gradient so "no .grad" means "never touched"
        p.requires_grad_(False)
    return model


def save_branches(
    path: str, classifiers: dict[str, AttributeClassifier], agnostic: AgnosticModel | None
) -> None:
    """RUN_DIR/branches.pt: every branch model with what is needed to rebuild it."""
    blob: dict = {"classifiers": {}, "agnostic": None}
    for name, m in classifiers.items():
        blob["classifiers"][name] = {
            "dim": int(m.dim), "num_classes": int(m.num_classes),
            "widths": [int(w) for w in m.widths],
            "state_dict": m.state_dict(),
        }  # fmt: skip
    if agnostic is not None:
        blob["agnostic"] = {"dim": int(agnostic.dim), "proj_dim": int(agnostic.proj_dim),
                            "state_dict": agnostic.state_dict()}  # fmt: skip
    torch.save(blob, path)


def load_branches(path: str) -> tuple[dict[str, AttributeClassifier], AgnosticModel | None]:
    """Inverse of :func:`save_branches`; every model comes back frozen (no pickle: weights only)."""
    remedy = "re-train the run (`mass train`) to write a fresh branches.pt"
    blob = load_checkpoint(path, what="branches", remedy=remedy)
    if not isinstance(blob, dict) or not isinstance(blob.get("classifiers"), dict):
        raise UnreadableInputError(f"{path}: not a branches file saved by `mass train`; {remedy}")
    classifiers = {}
    for name, d in blob["classifiers"].items():
        m = AttributeClassifier(d["dim"], d["num_classes"], widths=tuple(d["widths"]))
        m.load_state_dict(d["state_dict"])
        classifiers[name] = freeze(m)
    agnostic = None
    if blob.get("agnostic"):
        d = blob["agnostic"]
        agnostic = AgnosticModel(d["dim"], proj_dim=d["proj_dim"])
        agnostic.load_state_dict(d["state_dict"])
        freeze(agnostic)
    return classifiers, agnostic


class LogitsOnly(nn.Module):
    """Adapter: a branch classifier as a plain ``x -> logits`` model (for frozen_accuracy)."""

    def __init__(self, model: AttributeClassifier):
        super().__init__()
        self.model = model
        self.eval()  # callers that restore "training" mode must never unfreeze the branch

    def train(self, mode: bool = True) -> LogitsOnly:
        # a frozen branch stays in eval mode: BatchNorm must keep its running statistics
        return super().train(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[1]
