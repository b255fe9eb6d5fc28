"""The Great Expectations suites that gate publication, and their run.

Four pandas batches, one suite each, validated in one ephemeral GX context:

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

The audit passes iff every validation succeeds; Data Docs render each expectation.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field

import pandas as pd

# GX logs its decorator bookkeeping at INFO while importing (hundreds of lines under the CLI's
# INFO logging); the audit's stdout table is the summary, so keep GX at WARNING.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

from mass.audit.expectations import (  # noqa: E402  (after the GX logger is quietened)
    JUDGE_COLUMNS,
    ExpectAttributeToBePreserved,
    ExpectAttributeToBeSuppressed,
)

REQUIRED_METADATA = ("mass.model", "mass.model_version", "mass.sha256", "mass.method",
                     "mass.suppress", "mass.preserve", "mass.config_hash",
                     "mass.forced_columns")  # fmt: skip
SITE = "mass_audit"
__all__ = ["JUDGE_COLUMNS", "AuditOutcome", "SuiteSpec", "build_suites", "run_suites"]


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
    rows.append(E.ExpectColumnValuesToBeBetween(
        column="cosine", max_value=spec.max_cosine, strict_max=True,
        description=f"Every released row differs from its original: cosine similarity to the "
        f"original embedding < {spec.max_cosine:g} (a bypassed or near-identity modifier fails)",
    ))  # fmt: skip
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
    return {"release_columns": schema, "release_metadata": meta, "release_rows": rows,
            "attribute_privacy": attrs}  # fmt: skip


def run_suites(
    frames: dict[str, pd.DataFrame], spec: SuiteSpec, *, docs_dir: str | None = None
) -> AuditOutcome:
    """Validate each frame against its suite; build Data Docs into ``docs_dir`` if given."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # base.py pins its own logger at INFO and announces a temporary docs dir on every context
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        docs_dir = os.path.abspath(docs_dir)
        shutil.rmtree(docs_dir, ignore_errors=True)  # no stale pages from an earlier audit
        ctx.add_data_docs_site(site_name=SITE, site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })  # fmt: skip
    source = ctx.data_sources.add_pandas("mass_release")
    outcomes: list[ExpectationOutcome] = []
    success = True
    for name, expectations in build_suites(spec).items():
        if not expectations:
            continue
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        suite = ctx.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        vd = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        result = vd.run(batch_parameters={"dataframe": frames[name]}, result_format="SUMMARY")
        success = success and bool(result.success)
        for r in result.results:
            cfg = r.expectation_config
            assert cfg is not None  # GX attaches the configuration to every result it returns
            outcomes.append(ExpectationOutcome(
                suite=name, attribute=cfg.kwargs.get("attribute"), expectation=cfg.type,
                description=cfg.description or "",
                success=bool(r.success), observed=_observed(r),
            ))  # fmt: skip
    index = None
    if docs_dir is not None:
        ctx.build_data_docs(site_names=[SITE])
        index = os.path.join(docs_dir, "index.html")
    return AuditOutcome(success=success, expectations=outcomes, docs_index=index)


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
