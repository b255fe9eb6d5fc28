"""Which random streams a released modifier applies, read from the release's own metadata
(``mass.modifier``: {"kind", "spec"}, chains flattened): whether it is stochastic at all
(:func:`is_stochastic`) and, per part, the streams the key-compromised view recomputes
(:func:`streams`, used by :mod:`mass.audit.keyed`). Metadata only: no torch, no key, so the
datasheet (:mod:`mass.report.protection`) reads it too."""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)
DETERMINISTIC = {"affine", "quadratic_erasure", "sliced_repair", "codebook", "cells"}


def modifier_parts(metadata: dict[str, str]) -> list[tuple[str, dict]] | None:
    """The modifier of ``mass.modifier`` as a flat list of (kind, spec) parts, applied in
    order; None when the metadata is absent or malformed."""
    raw = metadata.get("mass.modifier")
    if not raw:
        return None
    try:
        blob = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        log.warning("release metadata mass.modifier is not JSON; no key-compromised figure")
        return None

    def flat(b) -> list[tuple[str, dict]] | None:
        if not isinstance(b, dict) or not isinstance(b.get("kind"), str):
            return None
        spec = b.get("spec") if isinstance(b.get("spec"), dict) else {}
        if b["kind"] != "chain":
            return [(b["kind"], spec)]
        out: list[tuple[str, dict]] = []
        for part in spec.get("parts") or []:
            sub = flat(part)
            if sub is None:
                return None
            out += sub
        return out or None

    parts = flat(blob)
    if parts is None:
        log.warning("release metadata mass.modifier %.200s: no kind/spec; skipped", raw)
    return parts


def num(spec: dict, key: str, default: float = 0.0) -> float:
    try:
        return float(spec.get(key, default))
    except (TypeError, ValueError):
        return default


def streams(kind: str, spec: dict) -> tuple[str | None, list[tuple[str, int, int, float]]]:
    """(outer strippable stream, inner streams) of one part; a stream is
    (name, seed offset, width, scale). KeyError for an unknown kind."""
    if kind == "mass":
        inner = []
        if int(num(spec, "noise_dim")) > 0:
            nd = int(num(spec, "noise_dim"))
            inner.append(("mass.noise_dim", 0, nd, num(spec, "noise_scale", 1.0)))
        outer = "mass.output_noise" if num(spec, "output_noise") > 0 else None
        return outer, inner
    if kind == "gaussian_noise":
        return ("gaussian_noise.sigma" if num(spec, "sigma") > 0 else None), []
    if kind == "genfilter":
        gaussian = spec.get("mode") == "gaussian"
        if gaussian and num(spec, "sigma") <= 0:
            return None, []
        width = int(num(spec, "latent", 16)) if gaussian else int(num(spec, "noise_dim", 16))
        return None, [("genfilter.w", 0, width, 1.0)] if width > 0 else []
    if kind in DETERMINISTIC:
        return None, []
    raise KeyError(kind)


def is_stochastic(parts: list[tuple[str, dict]]) -> bool | None:
    """Whether any part draws noise (None if a part's kind is unknown)."""
    try:
        return any(outer or inner for outer, inner in (streams(k, s) for k, s in parts))
    except KeyError:
        return None
