"""Branch models of MaSS: per-attribute classifiers (App. B.2) and the agnostic model (B.1).

Both are pretrained on the original embeddings and then frozen while G trains.

Views for the agnostic SimCLR model: the paper makes two views by augmenting raw data
(images, audio, video) before the fixed feature extractor. When only embeddings exist we
use an embedding-space augmentation instead: gaussian noise (``noise_std``) plus feature
dropout that zeroes a random ``drop_prob`` fraction of coordinates, then re-normalise to
the unit sphere. It keeps what is stable under small perturbations; with a raw-domain
augmentation available, pass precomputed view pairs ``views=(x1, x2)`` (e.g. from the
feature extractor run twice on augmented images) and they are used as-is.

The networks, their freezing and their file (branches.pt) are :mod:`mass.branch_models`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from mass.branch_models import AgnosticModel, AttributeClassifier, freeze
from mass.losses import nt_xent_loss
from mass.minibatch import batches


def embedding_augment(
    x: torch.Tensor, *, noise_std: float, drop_prob: float, generator: torch.Generator
) -> torch.Tensor:
    """One random view of unit embeddings: gaussian noise + feature dropout, re-normalised."""
    noise = torch.randn(x.shape, generator=generator) * noise_std
    keep = (torch.rand(x.shape, generator=generator) >= drop_prob).to(x.dtype)
    return F.normalize((x + noise) * keep, dim=-1)


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
        for idx in batches(len(xt), batch_size, gen):
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
        for idx in batches(len(xt), batch_size, gen):
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
