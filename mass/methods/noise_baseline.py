"""Gaussian noise on the features, renormalised: the MaSS paper's feature-domain baseline.

MaSS Table 5 / Appx. D: "we added zero-mean [Gaussian noise] with different standard deviations
(sigma) into the original feature vectors". Here x' = n(n(x) + sigma * eps) where eps is drawn
from the row's seed (:func:`mass.noise.row_noise`), so re-running a release is byte-identical.
Nothing is learned; ``fit`` only records sigma (served as :mod:`mass.modifiers.gaussian_noise`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mass.errors import ConfigError
from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import check_attrs
from mass.methods.base import knob
from mass.modifiers import GaussianNoiseModifier, NoiseSpec


@dataclass(frozen=True)
class NoiseParams(Params):
    sigma: float = knob(0.5, lo=0.0, help="noise std per coordinate (the paper: 0.5 and 1.0)")


@register_method("gaussian")
class GaussianNoise(Method):
    """x' = n(n(x) + sigma * eps(ROW_SEED))."""

    Params = NoiseParams

    def fit_params(self, train, p: NoiseParams, *, suppress, preserve, val, progress, **_):
        check_attrs(train, suppress, preserve)
        if p.sigma == 0.0:
            raise ConfigError("params.sigma=0: the noise baseline needs sigma > 0")
        modifier = GaussianNoiseModifier(NoiseSpec(dim=int(train.x.shape[1]), sigma=p.sigma))
        return FitResult(modifier=modifier.eval(), extra={"sigma": p.sigma, "stochastic": True})
