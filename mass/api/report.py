"""``audit_release``: the gate's audit from Python, with a report that renders in a notebook.

    report = audit_release(released_df, labels_df, suppress="gender", preserve="age")
    report            # in Jupyter: report.html, the page `mass audit` writes
    report.passed, report.table, report.figures["privacy_utility"]

The audit is `mass audit`'s own (:func:`mass.audit.into.audit_into`: the retrained attackers,
the bounds, the GX suites, audit.json, report.html); in-memory tables are written as Parquet
to a private directory first. The report directory is ``report_dir`` (kept) or a private
one, removed once the page and the figures are read into the :class:`AuditReport`.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AuditReport:
    """One audit: ``passed``, ``audit`` (audit.json), ``html`` (report.html), ``table`` (per
    attribute: role, worst judge, its limit or kept fraction, pass), ``figures`` (name -> PNG
    bytes: the page's charts), ``report_dir`` (None when it was private and is gone)."""

    passed: bool
    audit: dict = field(repr=False)
    html: str = field(repr=False)
    figures: dict[str, bytes] = field(repr=False)
    report_dir: str | None = None

    def _repr_html_(self) -> str:
        return self.html

    @property
    def table(self):
        """A pandas DataFrame, one row per audited attribute (the page's summary numbers)."""
        import pandas as pd

        from mass.report import view

        rows = []
        for name, row in view.attributes(self.audit).items():
            rows.append({"attribute": name, "role": row.get("role"), "n": row.get("n"),
                         "majority": row.get("majority"), "worst": row.get("worst"),
                         "limit": row.get("limit"), "excess": row.get("excess"),
                         "retention": row.get("retention"),
                         "passed": row.get("pass")})  # fmt: skip
        return pd.DataFrame(rows)

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        return f"audit {verdict}\n{self.table.to_string(index=False)}"


def _as_path(obj, tmp: str, name: str, *, id_col: str, emb_col: str, ids=None,
             meta: dict | None = None, need=None) -> str:  # fmt: skip
    """A Parquet path of ``obj`` (a path as it is; a table, DataFrame or matrix written; a
    DataFrame of labels is a table even when every column is a number). ``need``: the
    columns a DataFrame must hold (:func:`mass.api.frames.as_table`; None: all)."""
    import pyarrow as pa

    from mass.api import frames

    if obj is None:
        raise ValueError(f"{name}: None; pass a path, a table, a DataFrame or a matrix")
    if isinstance(obj, (str, os.PathLike)):
        return os.fspath(obj)
    table = frames.as_table(obj, what=name, need=need)
    if table is None and frames.is_pandas(obj) and id_col in getattr(obj, "columns", ()):
        table = pa.Table.from_pandas(obj, preserve_index=False)
    if table is None:  # a matrix: the embedding, ids 0..n-1 unless given
        x = frames.matrix(obj, what=name)
        table = frames.embedding_table(x, ids, id_col=id_col, emb_col=emb_col)
    if meta:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    return frames.write_private(table, tmp, name)


def _label_need(id_col: str, suppress, preserve, watch, policy) -> tuple[str, ...]:
    """The label columns the audit reads: the id, the named attributes and the watch
    attributes (``watch``, else the policy's ``audit.watch``, mass.audit.unnamed)."""
    from mass.api.frames import names

    watched = names(watch) or list(policy.watch)
    return (id_col, *names(suppress), *names(preserve), *watched)


def _figures(audit: dict) -> dict[str, bytes]:
    from mass.report import charts

    out = {}
    for name in ("privacy_utility", "learning_curves", "key_compromised"):
        png = getattr(charts, name)(audit)
        if png is not None:
            out[name] = png
    return out


def audit_release(release, labels, *, suppress, preserve=(), watch=(), policy=None,
                  report_dir: str | None = None, run_dir: str | None = None, id_col: str = "id",
                  emb_col: str = "emb", allow_columns=(), noise_key_file: str | None = None,
                  ids=None, input=None, model=None) -> AuditReport:  # fmt: skip
    """`mass audit` of ``release`` against held-out ``labels`` -> :class:`AuditReport`.

    ``release``: a release path (directory, file, glob), or an Arrow table / DataFrame with
    ``id_col`` and ``emb_col``, or a matrix (``ids``: its ids, default 0..n-1); ``labels``: a
    Parquet path or a table / DataFrame with ``id_col`` and the attribute columns; ``input``
    (optional, like ``labels``, or a matrix in ``ids`` order): the original rows, for the
    figures measured against them (what the release keeps of R). ``policy``:
    an :class:`mass.audit.AuditPolicy` or a params.yaml path (its ``audit:`` section); default
    the built-in policy, as `mass audit` without ``--params``. ``model``: the fitted
    :class:`mass.api.Suppressor` whose rows an in-memory release holds (its ``mass.*`` metadata,
    :meth:`~mass.api.Suppressor.release_metadata`, is what the audit reads of the model; a matrix
    has none without it and fails the schema suite); its modifier also recomputes the rows the
    release leaves at or above the policy's ``max_cosine``, and those that are its own output
    pass the bypass check, as in `mass anonymize` (docs/audit.md, "The bypass check"). A failed
    audit is a report with ``passed`` False, not an exception."""
    from mass.api.frames import names, private_dir
    from mass.audit import AuditPolicy, AuditRequest, load_policy
    from mass.audit.into import audit_into

    if not names(suppress):
        raise ValueError("suppress: name at least one attribute")
    if not isinstance(policy, AuditPolicy):
        policy = load_policy(policy)
    tmp = private_dir("mass-audit-")
    try:
        req = AuditRequest(
            release=_as_path(release, tmp, "release", id_col=id_col, emb_col=emb_col, ids=ids,
                             meta=None if model is None else model.release_metadata()),
            labels=_as_path(labels, tmp, "labels", id_col=id_col, emb_col=emb_col,
                            need=_label_need(id_col, suppress, preserve, watch, policy)),
            input=None if input is None else _as_path(input, tmp, "input", id_col=id_col,
                                                       emb_col=emb_col, ids=ids),
            suppress=tuple(names(suppress)), preserve=tuple(names(preserve)),
            watch=tuple(names(watch)), policy=policy, run_dir=run_dir, id_col=id_col,
            emb_col=emb_col, allow=tuple(names(allow_columns)), noise_key_file=noise_key_file,
            near=None if model is None else model.near_recompute(),
        )  # fmt: skip
        where = report_dir or os.path.join(tmp, "report")
        result, _ = audit_into(req, where)
        with open(os.path.join(where, "audit.json")) as f:
            audit: dict[str, Any] = json.load(f)
        from mass.report.html import REPORT_NAME

        with open(os.path.join(where, REPORT_NAME), encoding="utf-8") as f:
            html = f.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return AuditReport(passed=bool(result.success), audit=audit, html=html,
                       figures=_figures(audit), report_dir=report_dir)  # fmt: skip
