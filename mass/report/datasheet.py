"""_RELEASE.md + _release.json: what a release is, for the people and programs that consume it.

Both names start with ``_`` on purpose: pyarrow, pandas, Spark and Hadoop skip such files when
they read a directory, so ``pd.read_parquet(release_dir)`` keeps working (a ``RELEASE.md``
beside the parts makes those readers fail). ``_release.json`` is also the publisher's
marker + manifest (:data:`mass.formats.RELEASE_MARKER`); the datasheet is merged into it.

``write_datasheet`` is called at publication with the release's schema metadata (the
``mass.*`` keys of :func:`mass.release.columns.release_metadata`, plus any lineage the caller
has) and the audit (audit.json as a dict, or None when the release was not audited). The
machine-readable copy is merged into ``_release.json`` under ``"datasheet"``, so a manifest
the publisher wrote there keeps its own fields.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from mass import fs
from mass.errors import ReleaseError
from mass.names import split_names
from mass.report import view
from mass.report.protection import protection
from mass.report.unnamed import (
    LAST_RESORT_METHODS,
    MINIMISATION,
    unnamed_markdown,
    unnamed_of,
)

VOLATILE = ("time", "release_path", "labels_path", "input_path")  # audit.json lineage only
RELEASE_MD = "_RELEASE.md"
RELEASE_JSON = "_release.json"  # == mass.formats.RELEASE_MARKER
SCHEMA = "mass.datasheet/1"
THREAT_MODEL = (
    "Attacker: has read all code, docs and configuration, holds every release with its ids, "
    "and retrains any classifier on them; the audit measured such attackers on this release "
    "(on the embedding, on the ids and on every released column).",
)  # then what protects this release (mass.report.protection: keyed noise only when drawn)


VERBATIM_IDS = (
    "WARNING: ids released verbatim: the id column carries the input's own ids, so anyone who "
    "knows a person's id finds their row, and a public scheme in the ids (check digits, an "
    "encoded birth date or sex) is caught only as far as the audit's id judges read it; "
    "`mass anonymize --pseudonymize-ids` releases keyed pseudonyms instead."
)
UNAUDITED = (
    "This release was NOT audited (published with --no-audit): no attacker was measured on "
    "it, and nothing here says its suppressed attributes cannot be predicted from it."
)
CLAIM = "cannot be predicted from it while the preserved ones can."
_MD_SPECIAL = re.compile(r"([\\`*<>\[\]|])")  # what can start markup, links or HTML
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]+")


def md(value: Any) -> str:
    """Text from data as one line of inert markdown: control characters and line breaks
    become a visible ``\u23ce`` (no forged heading or "Verdict" line: data never starts a
    line), and the characters that open emphasis, code, links, tables or HTML are
    backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", _CONTROL.sub("\u23ce", str(value)))


def code(value: Any) -> str:
    """Text from data as one inline code span (line breaks made visible, fence longer than any
    run of backticks inside)."""
    text = _CONTROL.sub("\u23ce", str(value))
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _meta(metadata: Mapping, key: str) -> Any:
    """``mass.<key>`` (Parquet schema metadata, bytes or str) or plain ``<key>``."""
    for k in (f"mass.{key}", key, f"mass.{key}".encode(), key.encode()):
        if k in metadata:
            v = metadata[k]
            return v.decode() if isinstance(v, bytes) else v
    return None


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = split_names(value)
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _parts(release_dir: str) -> tuple[list[str], int | None, list[str]]:
    """Part files, total rows (from footers only) and the first part's columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(glob.glob(os.path.join(release_dir, "*.parquet")))
    rows, columns = 0, []
    try:
        for i, p in enumerate(parts):
            meta = pq.ParquetFile(p).metadata
            rows += meta.num_rows
            if i == 0:
                columns = list(meta.schema.to_arrow_schema().names)
    except (OSError, pa.ArrowException) as e:
        raise ReleaseError(f"{release_dir}: cannot read a part's footer ({e})") from e
    return [os.path.basename(p) for p in parts], (rows if parts else None), columns


def _audit_summary(audit: Mapping | None, report_path: str | None) -> dict:
    if audit is None:
        return {"verdict": "not audited", "report": report_path}
    verdict = {True: "passed", False: "failed"}.get(audit.get("pass"), "unknown")
    attrs = {}
    for name, row in view.attributes(audit).items():
        keep = ("role", "pass", "majority", "floor", "baseline", "limit", "family_limits",
                "worst", "retention", "certificate")  # fmt: skip
        attrs[name] = {k: row.get(k) for k in keep if k in row}
    return {"verdict": verdict, "report": report_path, "attributes": attrs,
            "unnamed": unnamed_of(audit),
            "failed_expectations": list(audit.get("failed_expectations") or []),
            "forced_policy": list(audit.get("forced_policy") or [])}  # fmt: skip


def datasheet(release_dir: str, *, metadata: Mapping, audit: Mapping | None,
              report_path: str | None) -> dict:  # fmt: skip
    """The machine-readable datasheet (what _release.json holds under "datasheet")."""
    parts, rows, columns = _parts(release_dir)
    lineage = audit.get("lineage") if isinstance(audit, Mapping) else None
    if isinstance(lineage, Mapping):  # the audit's time and the paths it read (a staging
        # directory named by pid) differ per run: they stay in the report's audit.json
        lineage = {k: v for k, v in lineage.items() if k not in VOLATILE}
    fields = ("model", "model_version", "method", "sha256", "config_hash",
              "noise_key_fingerprint", "modifier", "forced_columns", "ids")  # fmt: skip
    provenance = {k: v for k in fields if (v := _meta(metadata, k)) not in (None, "")}
    if isinstance(provenance.get("modifier"), str):
        try:
            provenance["modifier"] = json.loads(provenance["modifier"])
        except ValueError:
            pass
    return {
        "schema": SCHEMA,
        "embedding": {"parts": parts, "rows": rows, "columns": columns},
        "suppressed": _names(_meta(metadata, "suppress")),
        "preserved": _names(_meta(metadata, "preserve")),
        "provenance": provenance,
        "lineage": dict(lineage) if isinstance(lineage, Mapping) else None,
        "audit": _audit_summary(audit, report_path),
        "threat_model": [*THREAT_MODEL, protection(metadata)],
        "cite": {
            "git": "git rev-parse HEAD",
            "dvc": "dvc get <repo-url> <release-path> --rev <commit>",
        },  # fmt: skip
    }


# What a consumer must know about a method's release beyond "suppressed / preserved"
METHOD_NOTES = {m: " " + MINIMISATION for m in LAST_RESORT_METHODS}


def _markdown(sheet: Mapping, name: str | None) -> str:
    prov, emb, aud = sheet["provenance"], sheet["embedding"], sheet["audit"]
    audited = aud.get("verdict") != "not audited"
    model = f"{md(prov.get('model') or '?')} version {md(prov.get('model_version') or '?')}"
    # The publisher writes this inside its staging directory, and a re-run into another path
    # must give the same bytes: the release's path is named only when the caller gives it.
    # Everything from data (names, paths, columns) goes through md() or code(): one inert line.
    rel_name = _CONTROL.sub("\u23ce", name) if name else "<release-path>"
    lines = [
        f"# Release: {md(name) if name else model}",
        "",
        "## What this is",
        f"Privatized embeddings written by MaSS-ETL with the modifier {model} "
        f"(method {md(prov.get('method') or '?')}): "
        f"{emb['rows'] if emb['rows'] is not None else '?'} rows in {len(emb['parts'])} "
        f"Parquet part(s), columns {', '.join(md(c) for c in emb['columns']) or '?'}."
        " Each row keeps its id; the embedding was transformed so the suppressed attributes "
        + (CLAIM if audited else "should not be predictable from it (NOT verified: see Audit).")
        + METHOD_NOTES.get(str(prov.get("method")), ""),
        "",
        f"- Suppressed: {', '.join(md(a) for a in sheet['suppressed']) or 'none recorded'}",
        f"- Preserved: {', '.join(md(a) for a in sheet['preserved']) or 'none recorded'}",
        *([] if prov.get("ids") else [f"- {VERBATIM_IDS}"]),
        "",
        "## Audit",
        f"Verdict: **{md(aud['verdict']).upper()}**."
        + (f" Report: {code(aud['report'])}." if aud.get("report") else ""),
    ]
    if not audited:
        lines.append(UNAUDITED)
    for forced in aud.get("forced_policy") or []:
        lines.append(f"- FORCED POLICY: {md(forced)}")
    for name_, row in (aud.get("attributes") or {}).items():
        if row.get("role") == "suppressed":
            lim = f", limit {view.fmt(row['limit'])}" if view.num(row.get("limit")) else ""
            fams = view.family_limits(row)  # mixed margins: each family's own limit
            if fams is not None:
                lim = ", limits " + ", ".join(f"{md(f)} {view.fmt(v)}" for f, v in fams.items())
            lines.append(f"- {md(name_)} (suppressed): worst judge {view.fmt(row.get('worst'))} "
                         f"vs max(majority, floor) {view.fmt(row.get('baseline'))}{lim}, "
                         f"{'pass' if row.get('pass') else 'FAIL'}")  # fmt: skip
            if (cert := view.certificate_text(row)) is not None:
                lines.append(f"  - certificate: {md(cert)}")
        else:
            lines.append(f"- {md(name_)} (preserved): retention "
                         f"{view.fmt(row.get('retention'))}, "
                         f"{'pass' if row.get('pass') else 'FAIL'}")  # fmt: skip
    lines += unnamed_markdown(aud)  # what it keeps beyond the preserved (docs/audit.md)
    for f in aud.get("failed_expectations") or []:
        lines.append(f"- failed: {md(f)}")
    threat = list(sheet["threat_model"])
    if not audited:
        threat[0] = threat[0].split("; the audit measured")[0] + "; this release was not audited."
    lines += ["", "## Threat model", *(f"- {t}" for t in threat), "",
              "## Provenance"]  # fmt: skip
    lines += [f"- {md(k)}: {code(json.dumps(v) if not isinstance(v, str) else v)}"
              for k, v in prov.items()]  # fmt: skip
    lines += [
        "",
        "## How to cite this version",
        "The release is a DVC output; a version is the git commit whose dvc.lock pins it:",
        "",
        "```",
        "git rev-parse HEAD   # in the producing repository: the commit to cite",
        f"dvc get <repo-url> {rel_name} --rev <commit> -o {rel_name}   # exactly that version",
        "```",
        "",
        f"Machine-readable copy: `{RELEASE_JSON}` (key `datasheet`); the time of the audit "
        "is in the report's lineage (this file has none, so a re-run gives identical bytes).",
        "",
    ]
    return "\n".join(lines)


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_datasheet(release_dir: str, *, metadata: dict, audit: dict | None,
                    report_path: str | None, name: str | None = None) -> None:  # fmt: skip
    """Write ``_RELEASE.md`` and merge the datasheet into ``_release.json`` (key "datasheet")."""
    if not os.path.isdir(release_dir):
        raise ReleaseError(f"{release_dir}: not a release directory; publish the release first")
    sheet = datasheet(release_dir, metadata=metadata, audit=audit, report_path=report_path)
    manifest_path = os.path.join(release_dir, RELEASE_JSON)
    manifest: dict = {}
    if os.path.exists(manifest_path):
        manifest = fs.read_json_object(manifest_path, remedy="re-publish", error=ReleaseError)
    manifest["datasheet"] = sheet
    _write(manifest_path, json.dumps(manifest, indent=2, default=str) + "\n")
    _write(os.path.join(release_dir, RELEASE_MD), _markdown(sheet, name))
