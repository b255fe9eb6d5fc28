"""Custom Great Expectations (1.x) for attribute privacy and utility.

GX 1.x defines a custom expectation as a pydantic subclass of ``BatchExpectation`` whose
``metric_dependencies`` name metrics computed by a ``TableMetricProvider``; both register
themselves on class creation (``great_expectations/expectations/expectation.py``).
``UnexpectedRowsExpectation`` would be simpler but runs SQL only, and our batches are pandas.

The batch they validate is the *judge frame* built by :mod:`mass.audit.suite`: one row per
(attribute, judge) with the judge's accuracy on the release and the attribute's baselines,
all computed by :mod:`mass.metrics`. The thresholds are the expectations' own arguments
(the data owner's policy), so the GX result alone decides pass/fail and Data Docs show it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.expectation import BatchExpectation
from great_expectations.expectations.metrics.metric_provider import metric_value
from great_expectations.expectations.metrics.table_metric_provider import TableMetricProvider

from mass.metrics import judge_limit, judge_ok, preserved_ok
from mass.metrics.rules import FROZEN_SLACK, frozen_kept_ok
from mass.metrics.scores import FROZEN

JUDGE_COLUMNS = ("attribute", "role", "judge", "accuracy", "majority", "floor", "original",
                 "balanced", "ci_high", "balanced_ci_high", "chance", "balanced_floor")  # fmt: skip


class AttributeJudgeRows(TableMetricProvider):
    """Metric ``mass.attribute_judges``: the judge rows of one attribute, as records."""

    metric_name = "mass.attribute_judges"
    value_keys = ("attribute",)

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine, metric_domain_kwargs, metric_value_kwargs, metrics,
                runtime_configuration):  # fmt: skip
        df, _, _ = execution_engine.get_compute_domain(
            domain_kwargs=metric_domain_kwargs, domain_type=MetricDomainTypes.TABLE
        )
        missing = [c for c in JUDGE_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"judge frame lacks columns {missing}")
        rows = df[df["attribute"] == metric_value_kwargs["attribute"]]
        return [
            {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in rows[list(JUDGE_COLUMNS)].to_dict("records")
        ]


class ExpectAttributeToBeSuppressed(BatchExpectation):
    """Every judge is within its margin on both scales, judged on 95 % upper bounds:

    - accuracy: ``ci_high`` <= max(majority, floor) + margin;
    - balanced accuracy: ``balanced_ci_high`` <= max(chance, balanced_floor) + margin.

    ``margins`` maps each required judge ("frozen", "logreg", "logreg_remap", ...) to its
    margin; a judge without a row in the batch, or with a missing number, fails the
    expectation (an unmeasured attacker proves nothing).
    """

    attribute: str
    margins: dict[str, float]

    metric_dependencies = ("mass.attribute_judges",)
    domain_keys: ClassVar[tuple[str, ...]] = ()
    success_keys = ("attribute", "margins")
    args_keys = ("attribute", "margins")

    def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                  execution_engine: Any = None) -> dict:  # fmt: skip
        rows = {r["judge"]: r for r in metrics["mass.attribute_judges"]}
        missing = sorted(set(self.margins) - set(rows))
        details, failed = [], list(missing)
        worst = float("-inf")
        for judge, margin in self.margins.items():
            r = rows.get(judge)
            if r is None:  # already listed in missing
                continue
            if r["role"] != "suppressed":
                failed.append(judge)
                continue
            baseline = max(float(r["majority"]), float(r["floor"]))
            bal_baseline = max(float(r["chance"]), float(r["balanced_floor"]))
            high, bal_high = float(r["ci_high"]), float(r["balanced_ci_high"])
            # NaN compares False: a missing bound fails
            ok = judge_ok(high, baseline, bal_high, bal_baseline, float(margin))
            worst = max(worst, high - baseline, bal_high - bal_baseline)
            failed += [] if ok else [judge]
            details.append({"judge": judge, "accuracy": float(r["accuracy"]), "ci_high": high,
                            "limit": judge_limit(baseline, float(margin)),
                            "balanced": float(r["balanced"]), "balanced_ci_high": bal_high,
                            "balanced_limit": judge_limit(bal_baseline, float(margin)),
                            "passed": ok})  # fmt: skip
        return {
            "success": not failed and bool(details),
            "result": {
                "observed_value": (f"FAILED {', '.join(sorted(set(failed)))}; " if failed else "")
                + ", ".join(
                    f"{d['judge']} {d['accuracy']:.3f}<={d['ci_high']:.3f} "
                    f"(limit {d['limit']:.3f}), balanced {d['balanced']:.3f}<="
                    f"{d['balanced_ci_high']:.3f} (limit {d['balanced_limit']:.3f})"
                    for d in details
                )
                + f"; worst upper bound over its baseline {worst:+.4f}",
                "details": {"judges": details, "missing_judges": missing},
            },
        }


class ExpectAttributeToBePreserved(BatchExpectation):
    """The best retrained attacker on the release keeps >= ``min_fraction`` of the best
    retrained attacker's accuracy on the original embeddings, and the frozen judge (a model
    trained on the original rows, applied unchanged to the release), when it has a row, keeps
    >= ``min_fraction - FROZEN_SLACK`` of its own accuracy on the original rows: a release
    that keeps the attribute only up to a relabelling reads well retrained, backwards frozen.
    """

    attribute: str
    min_fraction: float

    metric_dependencies = ("mass.attribute_judges",)
    domain_keys: ClassVar[tuple[str, ...]] = ()
    success_keys = ("attribute", "min_fraction")
    args_keys = ("attribute", "min_fraction")

    def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                  execution_engine: Any = None) -> dict:  # fmt: skip
        rows = [
            r for r in metrics["mass.attribute_judges"]
            if r["role"] == "preserved" and r["judge"] != "frozen"
        ]  # fmt: skip
        if not rows:
            return {"success": False, "result": {"observed_value": "no retrained attacker rows"}}
        best = max(rows, key=lambda r: float(r["accuracy"]))
        acc, original = float(best["accuracy"]), float(best["original"])
        retention = acc / original if original > 0 else float("nan")
        ok = preserved_ok(acc, original, float(self.min_fraction))
        frozen = _frozen_reading(metrics["mass.attribute_judges"], float(self.min_fraction))
        observed = (f"retention {retention:.4f} ({best['judge']} {acc:.4f} "
                    f"of original {original:.4f})")  # fmt: skip
        if frozen is not None:
            observed += (f"; frozen {frozen['retention']:.4f} ({frozen['accuracy']:.4f} of "
                         f"{frozen['original']:.4f}, needs {frozen['min_fraction']:.2f})")  # fmt: skip
        return {
            "success": ok and (frozen is None or frozen["passed"]),
            "result": {
                "observed_value": ("" if ok else "FAILED retrained; ")
                + ("" if frozen is None or frozen["passed"] else "FAILED frozen; ") + observed,
                "details": {"accuracy": acc, "original": original, "retention": retention,
                            "judge": best["judge"], "frozen": frozen},
            },
        }  # fmt: skip


def _frozen_reading(rows: list[dict], min_fraction: float) -> dict | None:
    """The preserved attribute's frozen judge: its accuracy on the release over its own on
    the original rows, against ``min_fraction - FROZEN_SLACK`` (None: no frozen row)."""
    frozen = [r for r in rows if r["role"] == "preserved" and r["judge"] == FROZEN]
    if not frozen:
        return None
    acc, original = float(frozen[0]["accuracy"]), float(frozen[0]["original"])
    need = min_fraction - FROZEN_SLACK
    return {"accuracy": acc, "original": original, "min_fraction": need,
            "retention": acc / original if original > 0 else float("nan"),
            "passed": frozen_kept_ok(acc, original, min_fraction)}  # fmt: skip
