"""LEACE of S given R, then only the preserved attributes' discriminant directions are kept.

Data minimisation as a method: after ``leace_iterated``'s eraser (one round, given the preserved
labels) the release is projected orthogonally onto the span of R's linear discriminant
directions (Fisher LDA, k - 1 directions per preserved attribute with k classes, fitted on the
erased training rows), centred at the training mean. What lies outside that span - every
other property of the rows, S's non-linear traces among them - is dropped, so the release
keeps at most sum(k_r - 1) dimensions of information. That is the last thing a calibration
tries (docs/calibration.md): it keeps the named preserved attributes and nothing else the
data was useful for, and it is chosen only when no candidate that keeps more passes.

Why it exists: on first names embedded by MiniLM (gender suppressed, region preserved; docs
calibration.md) every LEACE variant left gender to kNN even at the highest noise and the
trained candidates lost region to the noise privacy needed; gender's remaining signal lived in
directions region does not use. Served as a ``chain`` of two ``affine`` modifiers (each
renormalises), like ``leace_iterated`` with several rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mass.errors import ConfigError
from mass.methods import FitResult, Method, Params, register_method
from mass.methods.base import knob
from mass.methods.leace import leace_affine
from mass.methods.leace_iterated import erasure_concept
from mass.metrics.discriminant import discriminant_basis
from mass.modifiers import AffineModifier, AffineSpec, ChainModifier


@dataclass(frozen=True)
class ProjectParams(Params):
    given_preserved: bool = knob(True, help="erase only what the preserved labels do not explain")
    shrinkage: bool = knob(True, help="shrink the covariance estimate (concept-erasure)")
    ridge: float = knob(1e-3, lo=0.0, help="within-class scatter shrinkage, share of its trace")


@register_method("leace_project")
class LeaceProject(Method):
    """LEACE given R, then the projection onto R's discriminant span (module docstring)."""

    Params = ProjectParams

    def fit_params(self, train, p: ProjectParams, *, suppress, preserve, val, progress, **_):
        if not preserve:
            raise ConfigError("leace_project keeps only the preserved attributes' directions: "
                              "name at least one --preserve attribute")  # fmt: skip
        x, codes = erasure_concept(train, suppress, preserve, p.given_preserved)
        weight, bias = leace_affine(x, codes, shrinkage=p.shrinkage)
        erase = AffineModifier(AffineSpec(dim=x.shape[1])).set(weight, bias).eval()
        with torch.no_grad():
            erased = erase(x)
        basis, mu = discriminant_basis(erased, {r: train.labels[r] for r in preserve}, p.ridge)
        proj = basis @ basis.T
        keep = (
            AffineModifier(AffineSpec(dim=x.shape[1]))
            .set(proj.float(), (-(proj @ mu)).float())
            .eval()
        )
        return FitResult(modifier=ChainModifier.of(erase, keep).eval(),
                         extra={"kept_dims": int(basis.shape[1]),
                                "given_preserved": p.given_preserved})  # fmt: skip
