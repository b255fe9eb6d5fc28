"""The owner's "key compromised" view of a release: its noise recomputed with the key, removed.

Every random stream a served modifier applies is ``mass.noise.row_noise`` of the row's keyed
seed (``mass.noise.keyed_row_seeds(id, key)``), so whoever holds the noise key recomputes it
exactly. This module does so from the release's ``mass.modifier`` metadata ({"kind", "spec"})
and builds what an attacker holding the key would train on:

- noise *added to a unit vector and renormalised* at the end (``mass`` output noise
  x' = n(y + sigma z(seed + 0x5EED) / sqrt(d)); ``gaussian_noise`` x' = n(n(x) + sigma
  eps(seed))) is stripped exactly: with w known and |y| = 1, y = t x' - w where
  t = x'.w + sqrt((x'.w)^2 - |w|^2 + 1) (the root with y.x' > 0; for |w| < 1 it is the only
  positive one). A ``gaussian_noise`` part's input is the previous part's unit output, so
  stripping continues into the chain;
- noise drawn *inside* a network (``mass`` input noise z(seed), ``genfilter`` w(seed), any
  noise before a deterministic part) cannot be subtracted: its vectors are appended to the
  features instead, so a retrained attacker can learn to cancel it.

The functions never write the key or anything derived from it anywhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from mass.keys import OwnerKey
from mass.noise import keyed_row_seeds, row_noise, row_seeds, subtract_noise
from mass.noise_streams import num as _num
from mass.noise_streams import streams as _streams
from mass.rows import normalize_rows

log = logging.getLogger(__name__)
OUTPUT_NOISE_OFFSET = 0x5EED  # mass.modifiers.DataModifier: output noise uses seed + 0x5EED


@dataclass(frozen=True)
class KeylessView:
    """Features of the release with the noise removed (stripped embedding + inner noise)."""

    x: np.ndarray  # float32 [N, d + m]
    stripped: tuple[str, ...]  # e.g. ("gaussian_noise.sigma",)
    appended: tuple[str, ...]  # noise streams given to the attackers as features


def _noise(seeds: torch.Tensor, offset: int, width: int) -> np.ndarray:
    return row_noise(seeds + offset, width).numpy().astype(np.float64)


def strip_unit_noise(x_prime: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Invert x' = n(y + w) for unit-norm y, given w (:func:`mass.noise.subtract_noise`)."""
    xp = np.asarray(x_prime, dtype=np.float64)
    return subtract_noise(normalize_rows(xp, np.float64), w)


def keyless_view(
    x_prime: np.ndarray,
    ids: pa.Array,
    parts: list[tuple[str, dict]],
    key: OwnerKey | None,
    *,
    context: str = "",
) -> KeylessView:
    """The release as an attacker holding ``key`` sees it (see the module docstring).

    ``context``: what ``mass anonymize`` bound the seeds to, the release metadata's
    ``mass.sha256`` (:func:`mass.noise.release_row_seeds`); with the wrong context the "noise"
    removed is another draw and the figure would wrongly say nothing rests on the key.
    ``key=None``: the noise of a release made before release noise was keyed, drawn from the
    public ``mass.noise.row_seeds(id)``: any attacker removes it.
    """
    raw = keyed_row_seeds(ids, key, context) if key is not None else row_seeds(ids)
    seeds = torch.from_numpy(np.ascontiguousarray(raw))
    y = np.asarray(x_prime, dtype=np.float64)
    dim = y.shape[1]
    stripped: list[str] = []
    appended: list[str] = []
    feats: list[np.ndarray] = []
    outer_open = True  # still at the outermost unit vector: stripping is exact
    for kind, spec in reversed(parts):
        outer, inner = _streams(kind, spec)
        if outer is not None and outer_open:
            if kind == "mass":
                w = _num(spec, "output_noise") * _noise(seeds, OUTPUT_NOISE_OFFSET, dim)
                y = strip_unit_noise(y, w / np.sqrt(dim))
            else:  # gaussian_noise: its input n(x) is the previous part's unit output
                y = strip_unit_noise(y, _num(spec, "sigma") * _noise(seeds, 0, dim))
            stripped.append(outer)
        elif outer is not None:
            offset = OUTPUT_NOISE_OFFSET if kind == "mass" else 0
            feats.append(_noise(seeds, offset, dim))
            appended.append(outer)
        for name, offset, width, scale in inner:
            feats.append(scale * _noise(seeds, offset, width))
            appended.append(name)
        # only a gaussian_noise part leaves its (unit) input exposed for the next strip
        outer_open = outer_open and kind == "gaussian_noise" and outer is not None
    x = np.hstack([y, *feats]) if feats else y
    return KeylessView(x.astype(np.float32), tuple(stripped), tuple(appended))
