"""Calibration under ``audit.gate_certificate`` (docs/calibration.md, "Under the certificate
gate"): the gate holds a release's certificate (docs/audit.md, "Certificate") to the policy's
margin, and a continuous release has none, so only cell candidates are tried, each without
release noise (noise makes every vector distinct). A cell candidate that passes validation
has its certificate measured where the lookup at the release's shape already released rows
its cells never saw: each half's release, cut to as many rows per cell as the gate's release
will hold, the worse half judged by the gate's rule and ranked on. Without the gate the same
figures are recorded, not judged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mass.audit.certified import certificate_block
from mass.metrics.certificate import Certificate, cells_of, certify_cells

# why a continuous candidate (and the last resort, and a transductive fit) is not tried
GATED_SKIP = (
    "not tried under audit.gate_certificate: a continuous release has no certificate (nor "
    "has a transductive fit, whose cells saw the audited rows), and the gate holds every "
    'release to one (docs/calibration.md, "Under the certificate gate")'
)


def rows_to_certify(release_rows: int, fit_rows: int, n_fit: int, counted: bool) -> int:
    """The released rows of one half that hold as many rows per cell as the gate's release of
    ``release_rows``: that many when the cell count is fixed (``cell_count``), else scaled by
    ``fit_rows`` / ``n_fit`` (the cells of a ``cell_rows`` fit grow with its rows, and the
    release model is fitted on ``n_fit``)."""
    n = release_rows if counted else release_rows * fit_rows / max(n_fit, 1)
    return max(1, int(round(n)))


def _worse(a: Certificate, b: Certificate) -> bool:
    """Whether certificate ``a`` is worse than ``b``: none at all, else the higher bounds."""
    if a.certified != b.certified:
        return not a.certified
    return a.certified and (a.balanced, a.accuracy) > (b.balanced, b.accuracy)


def certificates_at_release_shape(
    plain: np.ndarray, pairs, labels: dict, suppress, reports: dict, *, confidence: float,
    margins: dict[str, float], release_rows: int, n_fit: int, counted: bool, seed: int,
) -> tuple[dict[str, dict], list[str]]:  # fmt: skip
    """Per suppressed attribute, the worse half's certificate (``pairs``: the halves' (fit
    rows, released rows); ``plain``: their noise-free release) on a seeded draw of
    :func:`rows_to_certify` of its released rows (all of them when it holds fewer, on the
    safe side), judged as the audit's block judges it
    (:func:`mass.audit.certified.certificate_block`) with the baselines of ``reports`` (the
    lookups' reports) and each attribute's strictest margin in ``margins``; and why any is
    over its limits or has none."""
    rng = np.random.default_rng(seed)
    halves = []  # each half's drawn rows and their cell codes, once for every attribute
    for fit_rows, rows in pairs:
        take = min(len(rows), rows_to_certify(release_rows, len(fit_rows), n_fit, counted))
        sub = rows if take >= len(rows) else np.sort(rng.choice(rows, take, replace=False))
        halves.append((sub, cells_of(plain[sub])))
    out, over = {}, []
    for a in suppress:
        y = np.asarray(labels[a])
        worst = None
        for sub, codes in halves:
            c = certify_cells(codes, y[sub], confidence=confidence)
            worst = c if worst is None or _worse(c, worst) else worst
        r, m = reports.get(a), margins[a]
        if not worst.certified or r is None:
            block = {**worst.to_dict(), "within_limit": False}
            over.append(f"{a}: no certificate ({worst.reason or 'no released vector repeats'})")
        else:  # the audit's block at this margin (its "gated" is the audit's, not ours)
            block = certificate_block(
                replace(r, certificate=worst, margins=dict.fromkeys(r.margins, m))
            )
            block.pop("gated", None)
            need = block.get("resolution_plan")
            if not block["within_limit"]:
                over.append(
                    f"{a}: certified bound {worst.accuracy:.3f} (balanced {worst.balanced:.3f}) "
                    f"on {worst.rows} rows of {worst.cells} cells, limits "
                    f"{block['limit']:.3f} ({block['balanced_limit']:.3f})"
                    + (f"; cells independent of S would need about {need['rows_needed']:,} "
                       f"audited rows for {worst.cells} cells" if need else ""))  # fmt: skip
        out[a] = {**block, "release_rows": release_rows}
    return out, over


def worst_bound(certs: dict[str, dict]) -> float:
    """The highest balanced bound over the suppressed attributes (1.0 where one has none):
    what the ranking under the gate prefers low."""
    return max((1.0 if b.get("balanced") is None else float(b["balanced"])
                for b in certs.values()), default=1.0)  # fmt: skip


def gated_refusal(candidates: list[dict]) -> str:
    """The refusal's clause under the gate: that only noise-free cell candidates were tried,
    and the best certificate measured at the release's shape (calibration.json's candidate
    entries), with its limit, when any was."""
    seen = [(worst_bound(e["release_shape"]["certificate"]), e["name"], e["release_shape"])
            for e in candidates if (e.get("release_shape") or {}).get("certificate")]  # fmt: skip
    out = "; under audit.gate_certificate only noise-free cell candidates were tried"
    if not seen:
        return out + " and none reached its certificate (none passed validation)"
    bound, name, shape = min(seen, key=lambda v: v[0])
    blocks = shape["certificate"].values()
    limits = [b["balanced_limit"] for b in blocks if b.get("balanced_limit") is not None]
    plans = [(b["cells"], b["resolution_plan"]["rows_needed"]) for b in blocks
             if b.get("resolution_plan")]  # fmt: skip
    need = max(plans, key=lambda p: p[1], default=None)
    return out + (f": the best certificate at the release's shape was {name}'s, balanced "
                  f"<= {bound:.3f}" + (f" (limit {min(limits):.3f})" if limits else "")
                  + (f"; its {need[0]} cells (one half's) would need about {need[1]:,} "
                     "audited rows were S independent of the cell" if need else ""))  # fmt: skip
