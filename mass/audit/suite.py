"""The Great Expectations suites that gate publication, and their run.

Five pandas batches, one suite each, validated in one ephemeral GX context:

- ``release_columns`` (one row per release column): only id, embedding and allow-listed
  columns; no label column (suppressed ones never, others unless allow-listed).
- ``release_metadata`` (one row per ``mass.*`` schema key): the contract's keys exist.
- ``release_rows`` (one row per release row: id, in_labels, [in_input], finite, norm,
  cosine): row count equals the labels' (and --input's), ids unique, non-null and all known,
  every value finite, unit norm within ``norm_tol``, and no row's cosine similarity to its
  original at or above ``max_cosine`` (the bypass check: equality would miss a modifier that
  returns the normalised input, or the input x (1 + 1e-7)).
- ``attribute_privacy`` (one row per attribute x judge, numbers from :mod:`mass.metrics`):
  the custom :class:`ExpectAttributeToBeSuppressed` / :class:`ExpectAttributeToBePreserved`
  with the policy's thresholds as arguments.
- ``watch_utility`` (one row per watch attribute, :mod:`mass.audit.unnamed`): only with
  ``audit.watch_min_kept``, every learnable watch attribute keeps that normalised share.

The audit passes iff every validation succeeds; Data Docs render each expectation.
"""

from __future__ import annotations

import html
import logging
import os
import shutil
from dataclasses import dataclass, field

import pandas as pd

from mass.audit.expectations import (  # GX quietened by mass/audit/__init__.py
    ExpectAttributeToBePreserved,
    ExpectAttributeToBeSuppressed,
)

REQUIRED_METADATA = ("mass.model", "mass.model_version", "mass.sha256", "mass.method",
                     "mass.suppress", "mass.preserve", "mass.config_hash",
                     "mass.forced_columns")  # fmt: skip
SITE = "mass_audit"
__all__ = ["AuditOutcome", "SuiteSpec", "build_suites", "run_suites"]


@dataclass(frozen=True)
class SuiteSpec:
    """What the suites expect; built by the audit command from the policy and inputs."""

    id_col: str
    emb_col: str
    allowed: tuple[str, ...]  # allow-listed columns besides id and embedding
    forbidden: tuple[str, ...]  # label columns that must not be released
    n_labels: int
    n_input: int | None
    norm_tol: float
    suppressed: dict[str, dict[str, float]]  # attr -> judge -> margin
    preserved: dict[str, float]  # attr -> min fraction
    max_cosine: float = 0.9999  # a released row this close to its original is unmodified
    # rows at or above max_cosine that the anonymize job recomputed with the signed modifier
    # and found to be its own output (mass.batches.reference): at most this many may pass
    verified_near: int = 0
    watch_min_kept: float | None = None  # audit.watch_min_kept, when --watch names attributes


@dataclass(frozen=True)
class ExpectationOutcome:
    suite: str
    attribute: str | None
    expectation: str
    description: str
    success: bool
    observed: str


@dataclass(frozen=True)
class AuditOutcome:
    success: bool
    expectations: list[ExpectationOutcome] = field(default_factory=list)
    docs_index: str | None = None

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]


def cosine_expectation(spec: SuiteSpec, n_rows: int):
    """No row within ``max_cosine`` of its original, except at most ``verified_near`` rows the
    job verified as the signed modifier's own output (``mostly`` over ``n_rows``)."""
    import great_expectations.expectations as E

    kw, also = {}, ""
    if spec.verified_near and n_rows:
        kw["mostly"] = max(0.0, 1.0 - spec.verified_near / n_rows - 1e-12)
        also = (f"; at most {spec.verified_near} row(s) recomputed with the signed modifier "
                "(by the anonymize job, or `mass audit --model`) and found to be its own output (a deterministic eraser leaves "
                "rows whose erased component is ~0 where they were)")  # fmt: skip
    return E.ExpectColumnValuesToBeBetween(
        column="cosine", max_value=spec.max_cosine, strict_max=True, **kw,
        description=f"Every released row differs from its original: cosine similarity to the "
        f"original embedding < {spec.max_cosine:g} (a bypassed or near-identity modifier "
        f"fails){also}",
    )  # fmt: skip


def build_suites(spec: SuiteSpec) -> dict[str, list]:
    """Suite name -> list of expectation instances (GX imported lazily: ~4 s)."""
    import great_expectations as gx

    E = gx.expectations
    cols = [spec.id_col, spec.emb_col]
    schema = [
        E.ExpectColumnValuesToBeInSet(
            column="column",
            value_set=cols + list(spec.allowed),
            description=f"Release holds only {spec.id_col}, {spec.emb_col} and allow-listed "
            f"columns {list(spec.allowed)}",
        ),
        E.ExpectColumnDistinctValuesToContainSet(
            column="column", value_set=cols, description="Release has the id and embedding"
        ),
    ]
    if spec.forbidden:
        schema.append(E.ExpectColumnValuesToNotBeInSet(
            column="column", value_set=list(spec.forbidden),
            description=f"No label column is released: {list(spec.forbidden)}",
        ))  # fmt: skip
    meta = [E.ExpectColumnDistinctValuesToContainSet(
        column="key", value_set=list(REQUIRED_METADATA),
        description="Release schema metadata carries the contract's mass.* keys",
    )]  # fmt: skip
    tol = spec.norm_tol
    rows = [
        E.ExpectTableRowCountToEqual(
            value=spec.n_labels, description=f"Row count equals the labels' ({spec.n_labels})"
        ),
        E.ExpectColumnValuesToNotBeNull(column="id", description="No null id"),
        E.ExpectColumnValuesToBeUnique(column="id", description="Ids are unique"),
        E.ExpectColumnValuesToBeInSet(
            column="in_labels", value_set=[True], description="Every id is in the labels file"
        ),
        E.ExpectColumnValuesToBeInSet(
            column="finite", value_set=[True], description="Every embedding value is finite"
        ),
        E.ExpectColumnValuesToBeBetween(
            column="norm",
            min_value=1 - tol,
            max_value=1 + tol,
            strict_min=True,
            strict_max=True,
            description=f"Embeddings have unit norm (|norm - 1| < {tol:g})",
        ),
    ]
    rows.append(cosine_expectation(spec, spec.n_labels))
    if spec.n_input is not None:
        rows += [
            E.ExpectTableRowCountToEqual(
                value=spec.n_input, description=f"Row count equals --input's ({spec.n_input})"
            ),
            E.ExpectColumnValuesToBeInSet(
                column="in_input", value_set=[True], description="Every id is in --input"
            ),
        ]
    attrs: list = []
    for attr, margins in spec.suppressed.items():
        text = ", ".join(f"{j} +{m:g}" for j, m in margins.items())
        attrs.append(ExpectAttributeToBeSuppressed(
            attribute=attr, margins=dict(margins),
            description=f"'{attr}' is suppressed: for each judge the 95% upper bound of its "
            "accuracy on the release is at most max(majority, leakage floor) + margin, and "
            "of its balanced accuracy at most max(1/k, balanced leakage floor) + margin "
            f"({text})",
        ))  # fmt: skip
    for attr, frac in spec.preserved.items():
        attrs.append(ExpectAttributeToBePreserved(
            attribute=attr, min_fraction=frac,
            description=f"'{attr}' is preserved: best retrained attacker on the release "
            f"keeps at least {frac:g} x its accuracy on the original embeddings",
        ))  # fmt: skip
    watch = [] if spec.watch_min_kept is None else [E.ExpectColumnValuesToBeBetween(
        column="kept", min_value=spec.watch_min_kept,
        description=f"Every learnable watch attribute keeps at least {spec.watch_min_kept:g} of "
        "its normalised information, (release - majority) / (original - majority), "
        "for the best retrained attacker (audit.watch_min_kept)",
    )]  # fmt: skip
    suites = {"release_columns": schema, "release_metadata": meta, "release_rows": rows,
              "attribute_privacy": attrs, "watch_utility": watch}  # fmt: skip
    # GX renders descriptions into Data Docs as raw HTML: attribute and column names come
    # from data, so every description is HTML-escaped here (and unescaped in the outcome)
    for suite in suites.values():
        for exp in suite:
            exp.description = html.escape(exp.description or "", quote=False) or None
    return suites


def run_suites(
    frames: dict[str, pd.DataFrame], spec: SuiteSpec, *, docs_dir: str | None = None
) -> AuditOutcome:
    """Validate each frame against its suite; build Data Docs into ``docs_dir`` if given."""
    v = Validator(spec, docs_dir=docs_dir)
    for name, expectations in build_suites(spec).items():
        if name in frames or expectations:  # no watch attributes gated: no watch frame needed
            v.validate(name, frames[name])
    return v.finish()


TABLE_LEVEL = "expect_table_row_count_to_equal"


class Validator:
    """One ephemeral GX context; suites validated whole or, for ``release_rows`` of a release
    read in partitions (:mod:`mass.audit.stream`), partition by partition.

    Partitioned rows: each partition's frame is validated against the suite's column
    expectations, and the table-level ones (row counts) once on a column-less frame of the
    release's row count (a ``RangeIndex``: no memory per row). The results merge into one
    outcome per expectation: it succeeds iff it succeeded on every partition, and reports
    the summed unexpected count with the first examples.
    """

    def __init__(self, spec: SuiteSpec, *, docs_dir: str | None = None):
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        # base.py pins its own logger at INFO and announces a temporary docs dir per context
        logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
        self._gx, self.spec = gx, spec
        self.ctx = gx.get_context(mode="ephemeral")
        self.ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.docs_dir = os.path.abspath(docs_dir) if docs_dir is not None else None
        if self.docs_dir is not None:
            shutil.rmtree(self.docs_dir, ignore_errors=True)  # no stale pages from earlier
            self.ctx.add_data_docs_site(site_name=SITE, site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                                  "base_directory": self.docs_dir},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            })  # fmt: skip
        self.source = self.ctx.data_sources.add_pandas("mass_release")
        self.success = True
        self.outcomes: dict[str, list[ExpectationOutcome]] = {}
        self._parts: dict[int, list] = {}  # expectation -> [success, unexpected, sample, result]

    def _run(self, name: str, vd_name: str, expectations: list, frame: pd.DataFrame) -> list:
        gx = self._gx
        batch = self.source.add_dataframe_asset(vd_name).add_batch_definition_whole_dataframe(
            "all")  # fmt: skip
        suite = self.ctx.suites.add(gx.ExpectationSuite(name=vd_name, expectations=expectations))
        vd = self.ctx.validation_definitions.add(
            gx.ValidationDefinition(name=vd_name, data=batch, suite=suite)
        )
        result = vd.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY")
        # the data source's one execution engine caches every batch it ran on and every
        # metric it resolved, the per-row condition Series included, so memory grew with
        # the partitions (docs/journal/performance-history.md, "Memory: the first runs and
        # what still grew per partition (issue 14)"): drop both, the results are kept.
        # forget() is tested in tests/mass/audit/test_audit_stream.py.
        self.forget()
        self.success = self.success and bool(result.success)
        return list(result.results)

    def forget(self) -> None:
        """Drop what GX's execution engine keeps of the frames it validated."""
        engine = self.source.get_execution_engine()
        batches = engine.batch_manager
        batches.reset_batch_cache()
        batches.batch_data_cache.clear()
        if isinstance(engine._metric_cache, dict):  # GX's NoOpDict when caching is off
            engine._metric_cache.clear()

    def validate(self, name: str, frame: pd.DataFrame) -> None:
        """One suite on one whole frame."""
        expectations = build_suites(self.spec)[name]
        if expectations:
            self.outcomes[name] = [_outcome(name, r) for r in self._run(name, name, expectations,
                                                                       frame)]  # fmt: skip

    def validate_rows_part(self, i: int, frame: pd.DataFrame) -> None:
        """Partition ``i``'s ``release_rows`` frame against the column expectations."""
        exps = [cosine_expectation(self.spec, len(frame)) if _is_cosine(e) else e
                for e in build_suites(self.spec)["release_rows"]
                if e.expectation_type != TABLE_LEVEL]  # fmt: skip
        for k, r in enumerate(self._run("release_rows", f"release_rows_part{i:05d}", exps, frame)):
            res = r.result or {}
            acc = self._parts.setdefault(k, [True, 0, [], r])
            acc[0] = acc[0] and bool(r.success)
            acc[1] += int(res.get("unexpected_count") or 0)
            acc[2] += list(res.get("partial_unexpected_list") or [])[: 20 - len(acc[2])]
            if not r.success and acc[3].success:
                acc[3] = r  # an error or failure is what the outcome shows

    def finish_rows(self, n_rows: int) -> None:
        """Merge the partitions' results; the row counts on a column-less frame."""
        table = [e for e in build_suites(self.spec)["release_rows"]
                 if e.expectation_type == TABLE_LEVEL]  # fmt: skip
        frame = pd.DataFrame(index=pd.RangeIndex(n_rows))
        out = [_outcome("release_rows", r)
               for r in self._run("release_rows", "release_rows", table, frame)]  # fmt: skip
        for k in sorted(self._parts):
            ok, count, sample, r = self._parts[k]
            o = _outcome("release_rows", r)
            if _is_cosine(r.expectation_config) and not (r.exception_info or {}).get(
                    "raised_exception"):  # fmt: skip
                ok = count <= self.spec.verified_near  # each part allowed them all: the sum
            if not (r.exception_info or {}).get("raised_exception"):
                observed = f"{count} unexpected" + (f", e.g. {sample[:3]}" if sample else "")
                o = ExpectationOutcome(o.suite, o.attribute, o.expectation, o.description, ok,
                                       observed if count or not ok else o.observed)  # fmt: skip
            out.append(o)
        self.outcomes["release_rows"] = out

    def finish(self) -> AuditOutcome:
        index = None
        if self.docs_dir is not None:
            self.ctx.build_data_docs(site_names=[SITE])
            index = os.path.join(self.docs_dir, "index.html")
        order = list(build_suites(self.spec))
        outcomes = [o for name in order for o in self.outcomes.get(name, [])]
        success = self.success and all(o.success for o in outcomes)
        return AuditOutcome(success=success, expectations=outcomes, docs_index=index)


def _is_cosine(e) -> bool:
    return getattr(e, "column", None) == "cosine" or (
        getattr(e, "kwargs", None) or {}).get("column") == "cosine"  # fmt: skip


def _outcome(name: str, r) -> ExpectationOutcome:
    cfg = r.expectation_config
    assert cfg is not None  # GX attaches the configuration to every result it returns
    return ExpectationOutcome(
        suite=name, attribute=cfg.kwargs.get("attribute"), expectation=cfg.type,
        description=html.unescape(cfg.description or ""), success=bool(r.success),
        observed=_observed(r),
    )  # fmt: skip


def _observed(r) -> str:
    if r.exception_info and r.exception_info.get("raised_exception"):
        return f"error: {r.exception_info.get('exception_message')}"
    res = r.result or {}
    if "observed_value" in res:
        return str(res["observed_value"])
    if "unexpected_count" in res:
        sample = res.get("partial_unexpected_list") or []
        return f"{res['unexpected_count']} unexpected" + (f", e.g. {sample[:3]}" if sample else "")
    return ""
