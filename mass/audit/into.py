"""Run an audit and write its report anywhere: a local directory or an object-store prefix
(:mod:`mass.fs`). The one entry of `mass audit` and the publication gate of `mass anonymize`.
"""

from __future__ import annotations

import dataclasses
import tempfile

from mass import fs
from mass.audit.report import write_all
from mass.audit.runner import AuditRequest, run_audit


def audit_into(req: AuditRequest, report_dir: str, *, chart: bool = True):
    """Run the audit and write every report file into ``report_dir`` -> (result, audit.json
    dict). An object-store ``report_dir`` (:mod:`mass.fs`) is written locally first (GX Data
    Docs and the chart write files) and uploaded."""
    if not fs.is_remote(report_dir):
        result = run_audit(dataclasses.replace(req, report_dir=report_dir))
        return result, write_all(result, report_dir, chart=chart)
    with tempfile.TemporaryDirectory(prefix="mass-report-") as tmp:
        result = run_audit(dataclasses.replace(req, report_dir=tmp))
        metrics = write_all(result, tmp, chart=chart)
        fs.copy_tree(tmp, report_dir)
    return result, metrics
