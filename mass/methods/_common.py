"""Shared pieces of the fitting code of the comparison methods: attribute checks, label
tensors, small training loops, toy data and mutual-information estimators.

What they fit are the servable kinds of :mod:`mass.modifiers`; every kind ends with L2
normalisation (eq. 1's n()), so one export / anonymize / audit pipeline handles any method.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass.config import check_attribute_names
from mass.io import EmbeddingDataset
from mass.minibatch import batches
from mass.modifiers import l2_normalize
from mass.rows import normalize_rows


def check_attrs(train: EmbeddingDataset, suppress: list[str], preserve: list[str]) -> None:
    """Every named attribute has labels in ``train``; a suppressed one is never preserved."""
    check_attribute_names(suppress, preserve, train.labels,
                          source=train.source or "the training data")  # fmt: skip


def label_tensors(ds: EmbeddingDataset, attrs: list[str]) -> dict[str, torch.Tensor]:
    return {a: torch.as_tensor(ds.labels[a], dtype=torch.long) for a in attrs}


def n_classes(ds: EmbeddingDataset, attr: str) -> int:
    if attr in ds.encodings:
        return ds.num_classes(attr)
    return int(ds.labels[attr].max()) + 1


def unit_x(ds: EmbeddingDataset) -> torch.Tensor:
    # ds.x may be a read-only view of Arrow memory: torch warns on wrapping it, but the view is
    # only read here (l2_normalize returns a new tensor), so no copy is made for the warning
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        x = torch.as_tensor(np.ascontiguousarray(ds.x), dtype=torch.float32)
    return l2_normalize(x)


class FitInputs(NamedTuple):
    """What every learned method's ``fit`` starts from (see :func:`fit_inputs`)."""

    x: torch.Tensor  # unit-normalised training embeddings
    gen: torch.Generator  # seeded shuffling generator
    attrs: list[str]  # suppress + preserve
    ks: dict[str, int]  # classes per attribute
    labels: dict[str, torch.Tensor]  # long labels per attribute


def fit_inputs(
    train: EmbeddingDataset, suppress: list[str], preserve: list[str], *, seed: int
) -> FitInputs:
    """Validate the attributes, seed torch, and prepare x, labels and class counts."""
    check_attrs(train, suppress, preserve)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    attrs = [*suppress, *preserve]
    ks = {a: n_classes(train, a) for a in attrs}
    return FitInputs(unit_x(train), gen, attrs, ks, label_tensors(train, attrs))


def classifier(dim: int, k: int, hidden: int = 128) -> nn.Sequential:
    """The small ELU classifier the generative-filter paper uses as adversary / utility judge."""
    return nn.Sequential(nn.Linear(dim, hidden), nn.ELU(), nn.Linear(hidden, k))


def fit_classifier(
    x: torch.Tensor, y: torch.Tensor, k: int, *, epochs: int = 30, seed: int = 0, lr: float = 1e-3
) -> nn.Module:
    """Train :func:`classifier` with cross-entropy; returns it in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = classifier(x.shape[1], k)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        for idx in batches(len(x), 128, gen):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def entropy_of(y: torch.Tensor, k: int) -> float:
    """Empirical entropy H(y) in nats."""
    p = torch.bincount(y, minlength=k).double() / max(len(y), 1)
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def knn_mutual_information(x: np.ndarray, y: np.ndarray, *, k: int = 3) -> float:
    """I(X; Y) in nats for continuous X and discrete Y, kNN estimator (Ross 2014).

    I = psi(N) - <psi(N_y)> + psi(k) - <psi(m)>, where the k-th neighbour distance is taken
    within the row's class and m counts rows of any class inside that radius. The
    generative-filter paper (Appx. 6.6.2) reports such an empirical MI of release vs label.
    """
    from scipy.special import digamma
    from sklearn.neighbors import KDTree

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    n = len(y)
    radius = np.zeros(n)
    n_y = np.ones(n)
    keep = np.ones(n, dtype=bool)
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        n_y[rows] = len(rows)
        if len(rows) <= k:
            keep[rows] = False
            continue
        dist, _ = KDTree(x[rows], metric="chebyshev").query(x[rows], k=k + 1)
        radius[rows] = np.nextafter(dist[:, -1], 0)
    if keep.sum() < 2:
        return 0.0
    counts = KDTree(x, metric="chebyshev").query_radius(x[keep], r=radius[keep], count_only=True)
    m = counts.astype(float) - 1.0  # the row itself is inside its own radius
    mi = digamma(keep.sum()) - digamma(n_y[keep]).mean() + digamma(k) - digamma(m + 1).mean()
    return float(max(mi, 0.0))


def classifier_mutual_information(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> float:
    """Variational lower bound I(X; Y) >= H(Y) - CE(q(y|x)) in nats (generative filter, eq. 22)."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=500).fit(x_train, y_train)
    proba = np.clip(clf.predict_proba(x_test), 1e-12, 1.0)
    col = np.searchsorted(clf.classes_, y_test)
    seen = (col < len(clf.classes_)) & (
        clf.classes_[np.minimum(col, len(clf.classes_) - 1)] == y_test
    )
    ce = -np.log(
        np.where(seen, proba[np.arange(len(y_test)), np.minimum(col, proba.shape[1] - 1)], 1e-12)
    )
    _, counts = np.unique(y_test, return_counts=True)
    p = counts / counts.sum()
    return float(max(-(p * np.log(p)).sum() - ce.mean(), 0.0))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def toy_dataset(
    n: int = 300,
    *,
    dim: int = 16,
    classes: dict[str, int] | None = None,
    seed: int = 0,
    scale: float = 2.0,
    noise: float = 0.5,
) -> EmbeddingDataset:
    """Class-direction mixture for tests and ``--synthetic`` smoke runs: each attribute's class
    adds its own random direction, then Gaussian noise; rows L2-normalised."""
    import pyarrow as pa

    from mass.io import LabelEncoding

    classes = classes or {"a": 3, "b": 4}
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=noise, size=(n, dim))
    labels = {}
    for attr, k in classes.items():
        y = rng.integers(0, k, size=n)
        x += scale * rng.normal(size=(k, dim))[y] / np.sqrt(dim)
        labels[attr] = y.astype(np.int64)
    x = normalize_rows(x)
    encodings = {a: LabelEncoding(a, tuple(range(k))) for a, k in classes.items()}
    return EmbeddingDataset(
        ids=pa.array(np.arange(n, dtype=np.int64)),
        x=x,
        labels=labels,
        encodings=encodings,
        source="toy",
    )


def subset(ds: EmbeddingDataset, rows: np.ndarray) -> EmbeddingDataset:
    """Rows ``rows`` of ``ds`` (every other field as it is: encodings, source)."""
    import dataclasses

    import pyarrow as pa

    return dataclasses.replace(
        ds, ids=ds.ids.take(pa.array(rows)), x=ds.x[rows],
        labels={a: y[rows] for a, y in ds.labels.items()},
    )  # fmt: skip


def train_with_aux(
    modifier: nn.Module,
    aux: nn.Module,
    x: torch.Tensor,
    labels: dict[str, torch.Tensor],
    *,
    aux_loss,
    mod_loss,
    epochs: int,
    batch_size: int,
    lr: float,
    gen: torch.Generator,
) -> list[dict[str, float]]:
    """Alternate per batch: ``aux`` learns on the detached modified data (``aux_loss(h, x, y)``),
    then the modifier descends ``mod_loss(h, x, y)`` through the (un-stepped) aux networks.

    This is the "local" update of the attribute-unlearning paper (Sec. 3.3) and the usual
    adversarial alternation; one loop serves the unlearning and EnD methods.
    """
    opt_m = torch.optim.Adam(modifier.parameters(), lr=lr)
    opt_a = torch.optim.Adam(aux.parameters(), lr=lr) if list(aux.parameters()) else None
    history = []
    for _ in range(epochs):
        totals = {"mod_loss": 0.0, "aux_loss": 0.0}
        for idx in batches(len(x), batch_size, gen):
            xb = x[idx]
            yb = {a: y[idx] for a, y in labels.items()}
            h = modifier(xb)
            if opt_a is not None:
                a_loss = aux_loss(h.detach(), xb, yb)
                opt_a.zero_grad()
                a_loss.backward()
                opt_a.step()
                totals["aux_loss"] += float(a_loss.detach()) * len(idx)
            m_loss = mod_loss(h, xb, yb)
            opt_m.zero_grad()
            m_loss.backward()
            opt_m.step()
            totals["mod_loss"] += float(m_loss.detach()) * len(idx)
        history.append({k: v / len(x) for k, v in totals.items()})
    return history
