"""INLP: iterative nullspace projection (Ravfogel et al. 2020), in numpy.

Repeat: fit a linear classifier for each suppressed attribute on the current projected
features, add its weight rows to the erased subspace, and project onto the nullspace of
everything erased so far. After ``iterations`` rounds, x' = P (x - mu) + mu with
P = I - B B^T (B an orthonormal basis of the stacked classifier directions); the map is
served as the ``affine`` modifier kind and the output renormalised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import check_attrs, unit_x
from mass.methods.base import knob
from mass.modifiers import AffineModifier, AffineSpec


def nullspace_projection(directions: np.ndarray, dim: int) -> np.ndarray:
    """P = I - B B^T onto the orthogonal complement of the row space of ``directions``."""
    if directions.size == 0:
        return np.eye(dim)
    u, s, _ = np.linalg.svd(directions.T, full_matrices=False)
    basis = u[:, s > 1e-8 * max(s.max(), 1e-30)]
    return np.eye(dim) - basis @ basis.T


def inlp_projection(
    x: np.ndarray, ys: list[np.ndarray], *, iterations: int, seed: int = 0, margin: float = 0.02
) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Run INLP; returns P and, per iteration, each attribute's held-out accuracy before it.

    A multi-class classifier contributes all its k weight rows per round (as in the INLP
    paper), so 10 classes x 15 rounds could wipe a 128-d space: we stop early once every
    attribute's held-out accuracy (a seeded 20% split of the training rows) is within
    ``margin`` of its majority rate, i.e. nothing linear is left to remove.
    """
    from sklearn.svm import LinearSVC

    dim = x.shape[1]
    rng = np.random.default_rng(seed)
    dev = rng.random(len(x)) < 0.2
    directions = np.zeros((0, dim))
    proj = np.eye(dim)
    history = []
    for _ in range(iterations):
        xp = x @ proj
        row: dict[str, float] = {}
        done = True
        for j, y in enumerate(ys):
            clf = LinearSVC(C=1.0, dual="auto", max_iter=5000, random_state=seed)
            clf.fit(xp[~dev], y[~dev])
            acc = float(clf.score(xp[dev], y[dev])) if dev.any() else 1.0
            majority = float(np.bincount(y[dev]).max() / max(dev.sum(), 1)) if dev.any() else 0.0
            row[f"acc_{j}"] = acc
            if acc > majority + margin:
                done = False
                directions = np.vstack([directions, clf.coef_])
        history.append(row)
        if done:
            break
        proj = nullspace_projection(directions, dim)
    return proj, history


@dataclass(frozen=True)
class InlpParams(Params):
    iterations: int = knob(15, lo=1, help="nullspace-projection rounds at most")
    margin: float = knob(0.02, lo=0.0, help="stop once held-out accuracy is this near majority")


@register_method("inlp")
class Inlp(Method):
    """Iterative nullspace projection, served as one ``affine`` modifier."""

    Params = InlpParams

    def fit_params(self, train, p: InlpParams, *, suppress, preserve, val, progress, **_):
        check_attrs(train, suppress, preserve)
        x = unit_x(train).double().numpy()
        mu = x.mean(axis=0)
        proj, history = inlp_projection(
            x - mu,
            [train.labels[a] for a in suppress],
            iterations=p.iterations,
            seed=p.seed,
            margin=p.margin,
        )
        weight = torch.as_tensor(proj)
        bias = torch.as_tensor(mu - proj @ mu)
        modifier = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
        named = [
            {f"{suppress[int(k.split('_')[1])]}_acc": v for k, v in h.items()} for h in history
        ]
        return FitResult(
            modifier=modifier,
            history=named,
            extra={"erased_rank": int(round(x.shape[1] - np.trace(proj)))},
        )
