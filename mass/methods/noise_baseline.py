"""Gaussian noise on the features, renormalised: the MaSS paper's feature-domain baseline.

MaSS Table 5 / Appx. D: "we added zero-mean [Gaussian noise] with different standard deviations
(sigma) into the original feature vectors". Here x' = n(n(x) + sigma * eps) where eps is drawn
from the row's seed (:func:`mass.noise.row_noise`), so re-running a release is byte-identical.
Nothing is learned; ``fit`` only records sigma.
"""

from __future__ import annotations

import time
from typing import Any

from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.methods import FitResult, register_method
from mass.methods._common import GaussianNoiseModifier, NoiseSpec, check_attrs, param


@register_method("gaussian")
class GaussianNoise:
    """``params``: ``sigma`` (float, default 0.5; the paper reports 0.5 and 1.0)."""

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
        check_attrs(train, suppress, preserve)
        sigma = param(params, "sigma", 0.5, lo=0.0)
        if sigma == 0.0:
            raise ConfigError("params.sigma=0: the noise baseline needs sigma > 0")
        modifier = GaussianNoiseModifier(NoiseSpec(dim=int(train.x.shape[1]), sigma=sigma))
        return FitResult(
            modifier=modifier.eval(),
            seconds=time.perf_counter() - start,
            extra={"sigma": sigma, "stochastic": True},
        )
