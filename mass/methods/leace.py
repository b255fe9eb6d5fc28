"""LEACE and its quadratic variant, from the ``concept-erasure`` package, as servable modifiers.

``leace``: least-squares concept erasure (Belrose et al. 2023) fits one affine map
x' = P x + (I - P) mu that leaves no *linear* information about the concept. Several suppressed
attributes are erased jointly by fitting on their concatenated one-hot codes. The map is stored
as the ``affine`` modifier kind (then renormalised, like every release).

``leace_quadratic``: the package's ``QuadraticEraser`` transports each class of the concept to
the Wasserstein barycenter of the class-conditional Gaussians, which also removes second-order
(covariance) information. It needs the row's class *at transform time*. The released data's
labels are exactly what the serving model must not need, so the served modifier predicts the
class with a linear classifier fitted on the training features (stored inside the modifier)
and transports with the predicted class. Rows the predictor gets wrong are transported with
the wrong map; ``FitResult.extra['predictor_accuracy']`` records how often that happens on the
training split. Attributes are erased one after the other (each fit on the previous output).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.methods import FitResult, register_method
from mass.methods._common import (
    AffineModifier,
    AffineSpec,
    check_attrs,
    label_tensors,
    n_classes,
    param,
    unit_x,
)
from mass.modifier import l2_normalize, register_modifier


def leace_affine(
    x: torch.Tensor, codes: torch.Tensor, *, method: str = "leace", shrinkage: bool = True
):
    """(W, b) with W x + b equal to the fitted LEACE eraser applied to x."""
    from concept_erasure import LeaceFitter

    x64 = x.double()
    fitter = LeaceFitter(
        x.shape[1], codes.shape[1], method=method, shrinkage=shrinkage, dtype=torch.float64
    )
    eraser = fitter.update(x64, codes.double()).eraser
    lr = eraser.proj_left @ eraser.proj_right
    weight = torch.eye(x.shape[1], dtype=torch.float64) - lr
    bias = (
        lr @ eraser.bias
        if eraser.bias is not None
        else torch.zeros(x.shape[1], dtype=torch.float64)
    )
    return weight.float(), bias.float()


def one_hot_codes(labels: dict[str, torch.Tensor], ks: dict[str, int]) -> torch.Tensor:
    return torch.cat([nn.functional.one_hot(labels[a], ks[a]).float() for a in labels], dim=1)


class _Base:
    def _setup(self, train, suppress, preserve):
        check_attrs(train, suppress, preserve)
        return (
            unit_x(train),
            label_tensors(train, suppress),
            {a: n_classes(train, a) for a in suppress},
        )


@register_method("leace")
class Leace(_Base):
    """``params``: ``method`` ("leace" | "orth"), ``shrinkage`` (bool, default True)."""

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: dict[str, Any],
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> FitResult:
        start = time.perf_counter()
        x, labels, ks = self._setup(train, suppress, preserve)
        method = str(params.get("method", "leace"))
        if method not in ("leace", "orth"):
            raise ConfigError(f"params.method={method!r}: choose 'leace' or 'orth'")
        weight, bias = leace_affine(
            x, one_hot_codes(labels, ks), method=method, shrinkage=param(params, "shrinkage", True)
        )
        modifier = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
        rank = int(torch.linalg.matrix_rank(torch.eye(x.shape[1]) - weight, atol=1e-4))
        return FitResult(
            modifier=modifier, seconds=time.perf_counter() - start, extra={"erased_rank": rank}
        )


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


@register_method("leace_quadratic")
class LeaceQuadratic(_Base):
    """``params``: ``shrinkage`` (bool, default True). See the module docstring for serving."""

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: dict[str, Any],
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> FitResult:
        from concept_erasure import QuadraticFitter
        from sklearn.linear_model import LogisticRegression

        start = time.perf_counter()
        x, labels, ks = self._setup(train, suppress, preserve)
        for a, k in ks.items():
            counts = torch.bincount(labels[a], minlength=k)
            if int(counts.min()) < 2:
                raise ConfigError(
                    f"{a!r}: every class needs >= 2 training rows for leace_quadratic"
                )
        spec = QuadraticSpec(dim=x.shape[1], classes=tuple(ks[a] for a in suppress))
        modifier = QuadraticErasureModifier(spec)
        accuracy = {}
        cur = x.double()
        for i, a in enumerate(suppress):
            eraser = (
                QuadraticFitter(
                    x.shape[1],
                    ks[a],
                    dtype=torch.float64,
                    shrinkage=param(params, "shrinkage", True),
                )
                .update(cur, labels[a])
                .eraser
            )
            clf = LogisticRegression(max_iter=1000, random_state=seed).fit(
                cur.numpy(), labels[a].numpy()
            )
            w = np.zeros((ks[a], x.shape[1]))
            b = np.full(ks[a], -1e9)  # classes absent from the fit are never predicted
            if len(clf.classes_) == 2:  # sklearn stores one row for binary problems
                w[clf.classes_[1]], b[clf.classes_[1]] = clf.coef_[0], clf.intercept_[0]
                w[clf.classes_[0]], b[clf.classes_[0]] = 0.0, 0.0
            else:
                w[clf.classes_], b[clf.classes_] = clf.coef_, clf.intercept_
            getattr(modifier, f"means_{i}").copy_(eraser.class_means.float())
            getattr(modifier, f"center_{i}").copy_(eraser.global_mean.float())
            getattr(modifier, f"maps_{i}").copy_(eraser.ot_maps.float())
            getattr(modifier, f"pred_w_{i}").copy_(torch.as_tensor(w, dtype=torch.float32))
            getattr(modifier, f"pred_b_{i}").copy_(torch.as_tensor(b, dtype=torch.float32))
            pred = modifier.predict(i, cur.float())
            accuracy[a] = float((pred == labels[a]).float().mean())
            cur = modifier.erase_one(i, cur.float(), pred).double()
        return FitResult(
            modifier=modifier.eval(),
            seconds=time.perf_counter() - start,
            extra={"predictor_accuracy": accuracy},
        )
