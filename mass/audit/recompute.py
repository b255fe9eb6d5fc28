"""The bypass check of a standalone audit, with the signed modifier at hand (`mass audit --model`).

A deterministic eraser (LEACE, an affine map) leaves the rows whose erased component is ~0
where they were, so their cosine to the original is at or above the audit's ``max_cosine``.
`mass anonymize` tells those rows from a bypass by recomputing them in-process with the signed
modifier it served (:mod:`mass.batches.reference`). A later `mass audit` given the same signed
export does the same: every release row at or above ``max_cosine`` is recomputed from its
original (``--input``, or the labels' embeddings) with that modifier and the row's seed, and the
rows whose released vector is the modifier's own output are counted; the cosine expectation
then lets at most that many through, as in the job's gate (docs/audit.md, "The bypass check").
A near row the modifier would have moved is not counted, so a bypassed row still fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mass.batches.reference import AGREE_ATOL


@dataclass
class NearRecompute:
    """The signed modifier (a :class:`mass.batches.reference.ReferenceCheck`) and the row seeds
    the job sent (``seeds``: ids -> int64, None for the zero seeds)."""

    reference: Any
    seeds: Any = None
    recomputed: int = 0
    own: int = 0

    def add(self, ids: pa.Array, x: np.ndarray, released: np.ndarray) -> None:
        """Recompute the rows ``x`` (originals, unit norm) and count those whose ``released``
        vector is the modifier's own output."""
        if not len(ids):
            return
        s = np.zeros(len(ids), np.int64) if self.seeds is None else np.asarray(self.seeds(ids))
        ref = self.reference.outputs(x, s)
        agree = np.abs(np.asarray(released, np.float32) - ref).max(axis=1) <= AGREE_ATOL
        self.recomputed += len(ids)
        self.own += int(agree.sum())


def near_recompute(repository: str, model: str, version: str | None, *, signing_key,
                   noise_key, release_meta: dict[str, str], release: str) -> NearRecompute:  # fmt: skip
    """The verified export ``repository/model`` (signed with ``signing_key``) as the recompute
    of ``release``'s near rows; refused (:class:`ConfigError`) when it is not the modifier that
    made the release (its sha256 against the release's ``mass.sha256``) or is no modifier."""
    from mass.batches.reference import reference_check
    from mass.errors import ConfigError
    from mass.serving.staging import checked_export

    info = checked_export(repository, model, version, signing_key)
    made_by = release_meta.get("mass.sha256", "")
    if str(info.get("sha256") or "") != made_by:
        raise ConfigError(
            f"--model {model}: its export (version {info.get('version')}, sha256 "
            f"{str(info.get('sha256'))[:16]}) is not the modifier that made --release {release} "
            f"(sha256 {made_by[:16] or 'not recorded'}); name the model and --model-version "
            "the release was made with"
        )
    ref = reference_check(str(repository), model, info, carry=False)
    if ref is None:
        raise ConfigError(f"--model {model}: its export is no modifier: nothing to recompute")
    seeds = None
    if noise_key is not None:
        from mass.noise import keyed_row_seeds

        context = made_by

        def seeds(ids: pa.Array) -> np.ndarray:
            return keyed_row_seeds(ids, noise_key, context)

    return NearRecompute(ref, seeds)
