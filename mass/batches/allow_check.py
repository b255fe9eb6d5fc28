"""Up-front judgement of the allow-listed columns, before any inference.

An attacker sees every released column, not only the embedding. When `mass anonymize` has
labels for the model's attributes (the gate's plan) and ``--allow-columns`` names columns,
each column is judged ALONE against each suppressed attribute with the audit's own rule:
:func:`mass.metrics.attribute_report` on the column encoded as the audit encodes released
columns (:func:`mass.audit.columns.encode_released`: low bits and small moduli of integers,
string prefixes, suffixes and tokens, and out-of-fold per-value label statistics), by the policy's retrained attackers and
their re-mapped predictions, each held to the 95 % upper bound of its accuracy against
max(majority, leakage floor) + margin and of its balanced accuracy against
max(1/k, balanced floor) + margin (:attr:`mass.metrics.AttributeReport.passed`). The floors
come from the preserved labels, as in the audit. A column above the policy is refused
(:class:`mass.errors.ProxyColumnError`) unless ``--force-allow``, which records it in
``mass.forced_columns``; the gate's audit still judges the whole release.

The data: a seeded sample of at most the policy's ``max_rows`` labelled rows (the audit's own
bound), streamed batch by batch with pyarrow (only the id, label and allowed columns are
read) and joined to the allowed columns by id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import ConfigError, InvalidValueError, ProxyColumnError
from mass.io import expand_paths

log = logging.getLogger("mass.allow_check")
BATCH_ROWS = 65536
MIN_ROWS = 10  # the audit's MIN_AUDIT_ROWS: fewer rows cannot support k-fold attackers


@dataclass(frozen=True)
class ColumnVerdict:
    """One allowed column judged alone against one suppressed attribute.

    ``judge``/``scale``/``value``/``upper``/``limit``: the judge closest to (or furthest
    over) its limit, on the scale where it is ("accuracy" or "balanced accuracy").
    """

    column: str
    attribute: str
    rows: int
    passed: bool
    judge: str
    scale: str
    value: float  # the judge's point estimate on that scale
    upper: float  # its upper confidence bound, the number the rule judges
    limit: float  # baseline + margin on that scale
    baseline: float
    min_rows: int = 0  # rows from which a column at chance stays clear of the limit

    @property
    def few_rows(self) -> bool:
        return self.rows < self.min_rows

    def describe(self) -> str:
        base = "max(majority, floor)" if self.scale == "accuracy" else "max(1/k, balanced floor)"
        return (f"column '{self.column}' alone predicts suppressed attribute "
                f"'{self.attribute}': {self.judge} {self.scale} {self.value:.3f} (95% upper "
                f"bound {self.upper:.3f}) > limit {self.limit:.3f} = {base} "
                f"{self.baseline:.3f} + margin {self.limit - self.baseline:.3f}, on "
                f"{self.rows} sampled labelled rows" + (
                    f" (fewer than the {self.min_rows} from which a column at chance stays "
                    "clear of the limit: it may fail by chance; label more rows)"
                    if self.few_rows else ""))  # fmt: skip

    def to_dict(self) -> dict:
        return {"column": self.column, "attribute": self.attribute, "rows": self.rows,
                "passed": self.passed, "judge": self.judge, "scale": self.scale,
                "value": round(self.value, 6), "upper": round(self.upper, 6),
                "limit": round(self.limit, 6), "baseline": round(self.baseline, 6),
                "min_rows": self.min_rows}  # fmt: skip


def _plain(arr) -> pa.Array:
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _concat(parts: list[pa.Table], files: list[str], columns: list[str]) -> pa.Table:
    if parts:
        return pa.concat_tables(parts, promote_options="permissive")
    return pq.read_schema(files[0]).empty_table().select(columns)


def sample_rows(files: list[str], columns: list[str], *, max_rows: int | None,
                seed: int) -> pa.Table:  # fmt: skip
    """``columns`` of a seeded uniform sample of at most ``max_rows`` rows of ``files``
    (all rows when None), streamed batch by batch."""
    counts = [pq.ParquetFile(f).metadata.num_rows for f in files]
    total = sum(counts)
    keep = None
    if max_rows is not None and total > max_rows:
        keep = np.sort(np.random.default_rng(seed).choice(total, size=max_rows, replace=False))
    parts, offset = [], 0
    for f, n in zip(files, counts, strict=True):
        lo, hi = (0, n) if keep is None else np.searchsorted(keep, [offset, offset + n])
        if hi > lo:
            start = 0
            for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=columns):
                table = pa.Table.from_batches([batch])
                if keep is not None:
                    idx = keep[lo:hi] - offset - start
                    idx = idx[(idx >= 0) & (idx < batch.num_rows)]
                    table = table.take(pa.array(idx)) if idx.size else None
                if table is not None:
                    parts.append(table)
                start += batch.num_rows
        offset += n
    return _concat(parts, files, columns)


def rows_with_ids(files: list[str], columns: list[str], ids: pa.Array, *,
                  id_col: str) -> pa.Table:  # fmt: skip
    """``columns`` of the rows of ``files`` whose id is in ``ids``, streamed."""
    parts = []
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=columns):
            have = _plain(batch.column(id_col))
            want = ids
            if want.type != have.type:
                try:
                    want = want.cast(have.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    return _concat([], files, columns)  # incomparable ids match nothing
            mask = pc.is_in(have, value_set=want)
            if pc.any(mask).as_py():
                parts.append(pa.Table.from_batches([batch]).filter(mask))
    return _concat(parts, files, columns)


def labelled_sample(*, input_files: list[str], labels: str | None, id_col: str,
                    columns: list[str], attrs: list[str], max_rows: int | None,
                    seed: int) -> tuple[pa.Table, str]:  # fmt: skip
    """(id, ``columns`` and ``attrs`` of a seeded sample of labelled rows, where the labels
    came from). ``labels`` None: the input's own label columns, one streamed pass; else the
    labels file is sampled and the input's rows with those ids joined to it."""
    from mass.audit.data import positions

    if labels is None:
        cols = list(dict.fromkeys([id_col, *columns, *attrs]))
        return sample_rows(input_files, cols, max_rows=max_rows, seed=seed), "the input"
    lab = sample_rows(expand_paths(labels), [id_col, *attrs], max_rows=max_rows, seed=seed)
    lab_ids = _plain(lab.column(id_col))
    data = rows_with_ids(input_files, [id_col, *columns], lab_ids, id_col=id_col)
    pos = positions(lab_ids, _plain(data.column(id_col)))
    found = pos >= 0
    out = {id_col: lab_ids.filter(pa.array(found))}
    out.update({c: data.column(c).take(pa.array(pos[found])) for c in columns})
    out.update({a: lab.column(a).filter(pa.array(found)) for a in attrs if a not in out})
    return pa.table(out), f"--labels {labels}"


def _encode_labels(table: pa.Table, attr: str, source: str) -> np.ndarray:
    vals = _plain(table.column(attr))
    if vals.null_count:
        raise InvalidValueError(
            f"{source}: label column '{attr}' has {vals.null_count} null(s) in the sampled rows; "
            "the audit cannot judge them: fill or drop those rows"
        )
    return pc.index_in(vals, value_set=pc.unique(vals)).to_numpy(zero_copy_only=False)


def _verdict(column: str, report, confidence: float, y=None) -> ColumnVerdict:
    """The report's judge closest to (or over) its limit, read off the audit's own numbers
    (``y``: the attribute's labels, whose class shares set the balanced judges' rows)."""
    from mass.metrics import judge_limit

    best = None
    for judge in report.accuracies:
        m = report.margins[judge]
        acc = report.accuracies[judge]
        sides = [("accuracy", acc, report.ci_high.get(judge, acc), report.baseline)]
        if judge in report.balanced_ci_high:
            bal = report.balanced.get(judge, float("nan"))
            sides.append(("balanced accuracy", bal, report.balanced_ci_high[judge],
                          report.balanced_baseline))  # fmt: skip
        for scale, value, upper, base in sides:
            lim = judge_limit(base, m)
            cand = (upper - lim, judge, scale, value, upper, lim, base)
            if best is None or cand[0] > best[0]:
                best = cand
    assert best is not None, "attribute_report always has judges"
    from mass.audit.runner import class_counts, min_rows  # the audit's own few-rows warning

    _, judge, scale, value, upper, limit, base = best
    counts = class_counts(y) if report.balanced_ci_high else None
    need = min_rows(report.baseline, min(report.margins.values()), confidence, counts)
    return ColumnVerdict(column=column, attribute=report.name, rows=report.n,
                         passed=report.passed, judge=judge, scale=scale, value=float(value),
                         upper=float(upper), limit=float(limit), baseline=float(base),
                         min_rows=need)  # fmt: skip


def judge_columns(table: pa.Table, columns: list[str], *, suppress: list[str],
                  preserve: list[str], policy, source: str = "") -> list[ColumnVerdict]:  # fmt: skip
    """Each of ``columns`` alone against each suppressed attribute, by the audit's rule
    (``policy``: a :class:`mass.audit.policy.AuditPolicy`); ``table`` holds the columns and
    the label columns of the same rows."""
    from mass.audit.columns import encode_released
    from mass.metrics import attribute_report

    y = {a: _encode_labels(table, a, source) for a in dict.fromkeys([*suppress, *preserve])}
    out = []
    for col in columns:
        # the audit's own encoder: structure (low bits, moduli, tokens) + per-value label
        # statistics computed per attacker split from its training rows only
        enc = encode_released({col: table.column(col).combine_chunks()},
                              max_levels=policy.max_levels)[col]  # fmt: skip
        feats = enc.dense
        for attr in suppress:
            keep = {p: y[p] for p in preserve if p != attr}
            # x = x' = the column: it is carried unmodified, so the "original" is itself
            report = attribute_report(
                attr, y[attr], feats, feats, role="suppressed", preserved=keep, stats=enc.stats,
                margins=policy.margins(attr), families=policy.families, folds=policy.folds,
                seed=policy.seed, max_rows=policy.max_rows, confidence=policy.confidence,
                curve=False,  # the learning curve warns; it is not part of the rule
            )  # fmt: skip
            out.append(_verdict(col, report, policy.confidence, y[attr]))
    return out


def check_allow_columns(*, input_files: list[str], labels: str | None, id_col: str,
                        columns: list[str], suppress: list[str], preserve: list[str],
                        policy, force: bool) -> tuple[list[str], list[ColumnVerdict]]:  # fmt: skip
    """Refuse (:class:`ProxyColumnError`) an allowed column that predicts a suppressed
    attribute above ``policy``; with ``force`` return it as forced instead (to record).

    Returns (forced columns, every verdict). Columns of ``suppress`` themselves are left to
    the name rule (:func:`mass.release.columns.resolve_allow_columns`); callers pass the rest.
    """
    columns = [c for c in columns if c not in suppress]
    if not columns or not suppress:
        return [], []
    attrs = list(dict.fromkeys([*suppress, *preserve]))
    table, source = labelled_sample(input_files=input_files, labels=labels, id_col=id_col,
                                    columns=columns, attrs=attrs, max_rows=policy.max_rows,
                                    seed=policy.seed)  # fmt: skip
    if table.num_rows < MIN_ROWS:
        raise ConfigError(
            f"--allow-columns {','.join(columns)}: only {table.num_rows} labelled row(s) of "
            f"{source} join the input by '{id_col}'; the columns cannot be judged against "
            f"{suppress} (the audit needs >= {MIN_ROWS}): pass --labels covering the input, "
            "or drop --allow-columns"
        )
    verdicts = judge_columns(table, columns, suppress=suppress, preserve=preserve,
                             policy=policy, source=source)  # fmt: skip
    bad = [v for v in verdicts if not v.passed]
    for v in verdicts:
        log.info("allow-column check: %s", v.to_dict())
    if bad and not force:
        raise ProxyColumnError(
            f"--allow-columns: {'; '.join(v.describe() for v in bad)}; releasing it would "
            "undo the anonymization (labels from "
            f"{source}, the audit policy's attackers and limits): drop it from "
            "--allow-columns, or pass --force-allow to release it anyway (recorded in "
            "mass.forced_columns; the audit of the staged release still judges it); nothing "
            "was modified or published"
        )
    forced = list(dict.fromkeys(v.column for v in bad))
    for v in bad:
        log.warning("--force-allow: releasing %s (recorded in mass.forced_columns)",
                    v.describe())  # fmt: skip
    return forced, verdicts
