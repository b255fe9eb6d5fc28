"""The certificate of a cell release in the audit (docs/audit.md, "Certificate"): computed
once per suppressed attribute on every audited row (:mod:`mass.metrics.certificate`), judged
as the judge CERTIFICATE under ``audit.gate_certificate``, and written to audit.json and the
audit's stdout table."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mass import fs
from mass.audit.policy import AuditPolicy
from mass.metrics import AttributeReport
from mass.metrics.certificate import Certificate, certify_cells, plan
from mass.metrics.rules import CERTIFICATE, judge_limit, judge_ok
from mass.noise_streams import modifier_parts
from mass.rundir import CALIBRATION


def with_certificate(r: AttributeReport, cells: np.ndarray, y: np.ndarray,
                     metadata: dict[str, str], pol: AuditPolicy) -> AttributeReport:  # fmt: skip
    """The suppressed report with the release's certificate on the audited rows (``cells``:
    each row's released-vector code, :func:`mass.metrics.certificate.cells_of`) and,
    under ``audit.gate_certificate``, the judge CERTIFICATE held to the strictest judge's
    margin.

    A transductive modifier (:mod:`mass.fitrows`) fitted its cells on the released rows: the
    certificate needs rows the cells never saw, so there is none.
    """
    parts = modifier_parts(metadata) or []
    if any(spec.get("fit_ids_sha256") for _, spec in parts):
        n = int(len(y))
        why = (f"transductive fit: the cells were fitted on these {n} released rows; a "
               "certificate needs audited rows the cells never saw")  # fmt: skip
        cert = Certificate(n, 0, int(np.unique(y).size), round(1 - pol.confidence, 12),
                           reason=why)  # fmt: skip
    else:
        cert = certify_cells(cells, y, confidence=pol.confidence)
    margins = dict(r.margins)
    if pol.gate_certificate and margins:
        margins[CERTIFICATE] = min(margins.values())
    return replace(r, certificate=cert, margins=margins)


def _or_nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def certificate_rows(reports: list[AttributeReport]) -> list[dict]:
    """The judge-frame rows of the certified bounds (the expectation judges them only when
    the attribute's margins hold CERTIFICATE; a missing bound is NaN and then fails)."""
    return [
        {"attribute": r.name, "role": r.role, "judge": CERTIFICATE,
         "accuracy": _or_nan(c.plugin_accuracy), "majority": r.majority, "floor": r.floor,
         "original": r.original, "balanced": _or_nan(c.plugin_balanced),
         "ci_high": _or_nan(c.accuracy), "balanced_ci_high": _or_nan(c.balanced),
         "chance": r.chance, "balanced_floor": r.balanced_floor}
        for r in reports if r.role == "suppressed" and (c := r.certificate) is not None
    ]  # fmt: skip


def certificate_block(r: AttributeReport) -> dict | None:
    """audit.json ``attributes.<a>.certificate``: the bounds, what they rest on, the limits
    they are compared with, whether they are within them and whether the gate judged them."""
    c = r.certificate
    if c is None:
        return None
    m = min((v for j, v in r.margins.items() if j != CERTIFICATE), default=None)
    within = None  # the gate's own rule (judge_ok), whether or not the gate applies it
    if m is not None and c.accuracy is not None and c.balanced is not None:
        within = judge_ok(c.accuracy, r.baseline, c.balanced, r.balanced_baseline, m)
    out = c.to_dict()
    if (
        within is False and m is not None
    ):  # what resolution alone costs: rows for these cells, cells here
        out["resolution_plan"] = plan(c, m)
    out.update(limit=None if m is None else round(judge_limit(r.baseline, m), 6),
               balanced_limit=None if m is None else round(
                   judge_limit(r.balanced_baseline, m), 6),
               gated=CERTIFICATE in r.margins, within_limit=within)  # fmt: skip
    return out


def certificate_line(r: AttributeReport, block: dict | None) -> str | None:
    """One line of the audit's stdout table (None for an attribute without a certificate);
    ``block`` is the attribute's :func:`certificate_block`, built once by the caller."""
    c = r.certificate
    if c is None:
        return None
    if not c.certified:
        return f"{r.name}: no certificate ({c.reason})"
    line = (f"{r.name}: certified (any attacker, {1 - c.delta:.0%}): accuracy <= "
            f"{c.accuracy:.3f}, balanced <= {c.balanced:.3f} ({c.cells} cells, {c.rows} rows)"
            + (" [gated]" if CERTIFICATE in r.margins else ""))  # fmt: skip
    if (w := (block or {}).get("resolution_plan")) is not None:
        line += (f"; over its limit. Resolution alone (cells independent of S): within the "
                 f"margin {w['margin']:g}, {c.cells} cells need about {w['rows_needed']:,} "
                 f"audited rows; {c.rows:,} rows allow about {w['cells_allowed']:,} cells")  # fmt: skip
    return line


# a release this much smaller than the one its cells were calibrated for gets the hint
SIZE_HINT_RATIO = 0.8


def calibrated_size_hint(reports, run_dir: str | None) -> list[str]:
    """A warning per suppressed attribute of a cell release that fails its audit on fewer
    rows than its model's cells were calibrated for (``run_dir``'s calibration.json: the
    ``--release-rows`` calibration was told, else the rows it validated on): each cell holds
    fewer rows here, so the same cells read S with wider bounds, and calibration sizes the
    cells for the release it is told of (docs/calibration.md, "The lookup at the release's
    shape"). Nothing when there is no run directory or no readable calibration.json."""
    if not run_dir:
        return []
    path = fs.join(run_dir, CALIBRATION)
    try:
        val = fs.read_json(path)["validation"]
        rows = int(val.get("release_rows") or val["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [
        f"{r.name}: this cell release fails its audit on {r.n} audited rows, and its model's "
        f"cells were calibrated for releases of {rows} ({path}); each cell holds fewer rows "
        f"here and reads S with wider bounds: for a release of this size, calibrate with "
        f"`mass train --release-rows {r.n}`"
        for r in reports
        if r.role == "suppressed"
        and r.certificate is not None
        and not r.passed
        and r.n < SIZE_HINT_RATIO * rows
    ]
