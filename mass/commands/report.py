"""Re-render report.html from an audit's audit.json, without recomputing anything.

DIR is an audit report directory (the one holding audit.json), or a release directory whose
_release.json (datasheet) names the report. Writes DIR/report.html (one self-contained page,
no network needed) and makes DIR/data_docs work offline.
"""

from __future__ import annotations

import argparse
import json
import os

HELP = "re-render report.html from audit.json (no recomputation)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="RELEASE_OR_REPORT_DIR",
                        help="audit report directory, or a release with a datasheet")  # fmt: skip


def report_dir_of(path: str) -> str:
    """The directory holding audit.json: ``path`` itself, or the one its datasheet names."""
    from mass.errors import InputError, MissingInputError
    from mass.report.datasheet import RELEASE_JSON
    from mass.report.view import AUDIT_NAME

    if not os.path.isdir(path):
        raise MissingInputError(f"{path}: no such directory; pass an audit report directory")
    if os.path.exists(os.path.join(path, AUDIT_NAME)):
        return path
    manifest = os.path.join(path, RELEASE_JSON)
    report = None
    if os.path.exists(manifest):
        try:
            with open(manifest) as f:
                sheet = json.load(f).get("datasheet") or {}
            report = (sheet.get("audit") or {}).get("report")
        except (OSError, ValueError, AttributeError) as e:
            raise InputError(f"{manifest}: not a readable datasheet ({e}); pass the report "
                             "directory `mass audit --report` wrote") from e  # fmt: skip
    if report:
        cands = [report] if os.path.isabs(report) else [os.path.join(path, report), report]
        for cand in cands:
            d = cand if os.path.isdir(cand) else os.path.dirname(cand)
            if os.path.exists(os.path.join(d, AUDIT_NAME)):
                return d
    raise MissingInputError(
        f"{path}: no {AUDIT_NAME} here and no datasheet naming a report that has one; pass the "
        "directory `mass audit --report` wrote"
    )


def run(args: argparse.Namespace) -> int:
    from mass.report.html import write_html_report

    path = write_html_report(report_dir_of(args.dir))
    print(f"report: wrote {path}")
    return 0
