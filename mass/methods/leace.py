"""LEACE and its quadratic variant, from the ``concept-erasure`` package: the fitters.

``leace``: least-squares concept erasure (Belrose et al. 2023) fits one affine map
x' = P x + (I - P) mu that leaves no *linear* information about the concept. Several suppressed
attributes are erased jointly by fitting on their concatenated one-hot codes. The map is served
as the ``affine`` modifier kind (:mod:`mass.modifiers.affine`; then renormalised, like every
release).

``leace_quadratic``: the package's ``QuadraticEraser`` transports each class of the concept to
the Wasserstein barycenter of the class-conditional Gaussians, which also removes second-order
(covariance) information. It needs the row's class *at transform time*. The released data's
labels are exactly what the serving model must not need, so the served modifier
(:mod:`mass.modifiers.quadratic`) predicts the class with a linear classifier fitted here on
the training features and transports with the predicted class. Rows the predictor gets wrong
are transported with the wrong map; ``FitResult.extra['predictor_accuracy']`` records how often
that happens on the training split. Attributes are erased one after the other (each fit on the
previous output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import check_attrs, label_tensors, n_classes, unit_x
from mass.methods.base import knob
from mass.modifiers import AffineModifier, AffineSpec, QuadraticErasureModifier, QuadraticSpec


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


def erasure_inputs(train: EmbeddingDataset, suppress: list[str], preserve: list[str]):
    """(unit x, suppressed labels, their class counts) after the attribute checks."""
    check_attrs(train, suppress, preserve)
    return (
        unit_x(train),
        label_tensors(train, suppress),
        {a: n_classes(train, a) for a in suppress},
    )


@dataclass(frozen=True)
class LeaceParams(Params):
    estimator: str = knob("leace", choices=("leace", "orth"),
                          help="concept-erasure's LeaceFitter method")  # fmt: skip
    shrinkage: bool = knob(True, help="shrink the covariance estimate (concept-erasure)")


@register_method("leace")
class Leace(Method):
    """One affine LEACE eraser for all suppressed attributes jointly."""

    Params = LeaceParams

    def fit_params(self, train, p: LeaceParams, *, suppress, preserve, val, progress, **_):
        x, labels, ks = erasure_inputs(train, suppress, preserve)
        weight, bias = leace_affine(
            x, one_hot_codes(labels, ks), method=p.estimator, shrinkage=p.shrinkage
        )
        modifier = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
        rank = int(torch.linalg.matrix_rank(torch.eye(x.shape[1]) - weight, atol=1e-4))
        return FitResult(modifier=modifier, extra={"erased_rank": rank})


@dataclass(frozen=True)
class QuadraticParams(Params):
    shrinkage: bool = knob(True, help="shrink the covariance estimates (concept-erasure)")


@register_method("leace_quadratic")
class LeaceQuadratic(Method):
    """Quadratic erasure with a stored class predictor; see the module docstring for serving."""

    Params = QuadraticParams

    def fit_params(self, train, p: QuadraticParams, *, suppress, preserve, val, progress, **_):
        from concept_erasure import QuadraticFitter
        from sklearn.linear_model import LogisticRegression

        x, labels, ks = erasure_inputs(train, suppress, preserve)
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
                QuadraticFitter(x.shape[1], ks[a], dtype=torch.float64, shrinkage=p.shrinkage)
                .update(cur, labels[a])
                .eraser
            )
            clf = LogisticRegression(max_iter=1000, random_state=p.seed).fit(
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
        return FitResult(modifier=modifier.eval(), extra={"predictor_accuracy": accuracy})
