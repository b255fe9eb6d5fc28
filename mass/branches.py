"""Branch models of MaSS: per-attribute classifiers (App. B.2) and the agnostic model (B.1).

Both are pretrained on the original embeddings and then frozen while G trains.

Views for the agnostic SimCLR model: the paper makes two views by augmenting raw data
(images, audio, video) before the fixed feature extractor. When only embeddings exist we
use an embedding-space augmentation instead: gaussian noise (``noise_std``) plus feature
dropout that zeroes a random ``drop_prob`` fraction of coordinates, then re-normalise to
the unit sphere. It keeps what is stable under small perturbations; with a raw-domain
augmentation available, pass precomputed view pairs ``views=(x1, x2)`` (e.g. from the
feature extractor run twice on augmented images) and they are used as-is.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass.errors import UnreadableInputError
from mass.losses import nt_xent_loss
from mass.safe_load import load_checkpoint


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


def embedding_augment(
    x: torch.Tensor, *, noise_std: float, drop_prob: float, generator: torch.Generator
) -> torch.Tensor:
    """One random view of unit embeddings: gaussian noise + feature dropout, re-normalised."""
    noise = torch.randn(x.shape, generator=generator) * noise_std
    keep = (torch.rand(x.shape, generator=generator) >= drop_prob).to(x.dtype)
    return F.normalize((x + noise) * keep, dim=-1)


def freeze(model: nn.Module) -> nn.Module:
    """Eval mode (BatchNorm uses running stats) and no parameter takes gradients."""
    model.eval()
    for p in model.parameters():
        p.grad = None  # drop pretraining's last gradient so "no .grad" means "never touched"
        p.requires_grad_(False)
    return model


def _batches(n: int, batch_size: int, gen: torch.Generator):
    perm = torch.randperm(n, generator=gen)
    for i in range(0, n, batch_size):
        idx = perm[i : i + batch_size]
        if idx.numel() >= 2:  # BatchNorm needs two rows in training mode
            yield idx


def _cosine(opt: torch.optim.Optimizer, steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, steps) / max(steps, 1)))
    )


def train_classifier(
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    *,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 0.01,
    weight_decay: float = 0.05,
    seed: int = 0,
) -> AttributeClassifier:
    """Cross-entropy training of one attribute model (AdamW, cosine lr; App. B.2), frozen."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    model = AttributeClassifier(xt.shape[1], num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = _cosine(opt, epochs * math.ceil(len(xt) / batch_size))
    model.train()
    for _ in range(epochs):
        for idx in _batches(len(xt), batch_size, gen):
            loss = F.cross_entropy(model(xt[idx])[1], yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return freeze(model)


def train_agnostic(
    x: np.ndarray,
    *,
    views: tuple[np.ndarray, np.ndarray] | None = None,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 0.05,
    weight_decay: float = 1e-4,
    tau: float = 0.07,
    noise_std: float = 0.05,
    drop_prob: float = 0.2,
    proj_dim: int = 128,
    seed: int = 0,
) -> AgnosticModel:
    """SimCLR (NT-Xent, SGD, cosine lr; App. B.1) on two views of each row, frozen.

    ``views`` = precomputed (x1, x2) pairs from a raw-domain augmentation; otherwise both
    views come from :func:`embedding_augment` of ``x``.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    xt = torch.as_tensor(x, dtype=torch.float32)
    pair = None
    if views is not None:
        pair = tuple(torch.as_tensor(v, dtype=torch.float32) for v in views)
        if pair[0].shape != xt.shape or pair[1].shape != xt.shape:
            raise ValueError(f"views must both have shape {tuple(xt.shape)}")
    model = AgnosticModel(xt.shape[1], proj_dim=proj_dim)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    sched = _cosine(opt, epochs * math.ceil(len(xt) / batch_size))
    model.train()
    for _ in range(epochs):
        for idx in _batches(len(xt), batch_size, gen):
            if pair is not None:
                a, b = pair[0][idx], pair[1][idx]
            else:
                kw = dict(noise_std=noise_std, drop_prob=drop_prob, generator=gen)
                a, b = embedding_augment(xt[idx], **kw), embedding_augment(xt[idx], **kw)
            loss = nt_xent_loss(model(a)[1], model(b)[1], tau=tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return freeze(model)


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
