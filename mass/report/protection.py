"""The datasheet's sentence on what protects the suppressed attributes, true for each release.

Only a stochastic modifier draws noise, and only a keyed release draws it from the owner's
secret; the sentence is chosen from the release's own metadata (``mass.modifier``, as the
key-compromised audit reads it, and ``mass.noise_key_fingerprint``)."""

from __future__ import annotations

from collections.abc import Mapping

OUT_OF_SCOPE = "anyone holding the original embeddings is out of scope."


def protection(metadata: Mapping) -> str:
    """One sentence: modifier plus owner-keyed noise, modifier alone (deterministic), modifier
    plus public (unkeyed) noise, or unknown when the modifier is not recorded."""
    from mass.noise_streams import is_stochastic, modifier_parts

    meta = {str(k.decode() if isinstance(k, bytes) else k):
            str(v.decode() if isinstance(v, bytes) else v) for k, v in metadata.items()}  # fmt: skip
    parts = modifier_parts(meta)
    stochastic = None if parts is None else is_stochastic(parts)
    keyed = bool(meta.get("mass.noise_key_fingerprint"))
    if stochastic is None:
        return ("What protects the suppressed attributes is the modifier; this release does not "
                "record which one, so whether owner-keyed noise adds to it is unknown; "
                + OUT_OF_SCOPE)  # fmt: skip
    if not stochastic:
        return ("What protects the suppressed attributes is the modifier alone: it is "
                "deterministic and draws no noise, so no secret key protects this release (the "
                "same row always gives the same output); " + OUT_OF_SCOPE)  # fmt: skip
    if keyed:
        return ("What protects the suppressed attributes is the modifier plus noise keyed by the "
                "data owner's secret key; anyone holding that key or the original embeddings is "
                "out of scope.")  # fmt: skip
    return ("What protects the suppressed attributes is the modifier alone: its noise was drawn "
            "from the public ids, not from a secret key, so anyone can recompute and remove it "
            "(the audit judged the release with it removed); " + OUT_OF_SCOPE)  # fmt: skip
