"""The audit's unnamed-utility section (mass.metrics.unnamed, docs/audit.md): watch
attributes and label-free structure measured on the audited sample, the frame the optional
``audit.watch_min_kept`` expectation validates, and the lines of the stdout table."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pandas as pd

from mass.errors import ConfigError
from mass.report.unnamed import capacity_of, spread
from mass.rows import joint_codes

log = logging.getLogger(__name__)

STRUCTURE_ROWS = 2000  # k-NN within S classes and the last resort's fit: a seeded subsample
WATCH_COLUMNS = ("attribute", "kept", "original", "release", "majority", "explained_by_s")


def check_watch(watch, suppress, preserve) -> None:
    """ConfigError for a watch attribute that is also suppressed or preserved (by name)."""
    for role, names in (("--suppress", suppress), ("--preserve", preserve)):
        both = sorted(set(watch) & set(names))
        if both:
            raise ConfigError(f"--watch: {both} also in {role}; a watch attribute is neither "
                              "suppressed nor preserved (drop it from one)")  # fmt: skip


def effective_watch(flag, policy_watch, columns, *, where: str) -> tuple[str, ...]:
    """The watch attributes of one run: ``flag`` (--watch) as given, else those of the
    policy's ``audit.watch`` that ``columns`` hold (the policy is shared by every dataset
    the owner audits: one it does not label is skipped with a warning, not an error)."""
    if flag:
        return tuple(flag)
    missing = [w for w in policy_watch if w not in columns]
    if missing:
        log.warning("audit.watch %s: no such column in %s; not watched here", missing, where)
    return tuple(w for w in policy_watch if w in columns)


def measure_unnamed(x, xp, y: dict[str, np.ndarray], *, suppress, preserve, watch, policy,
                    extra=None, names=None, cells=None) -> dict[str, Any]:  # fmt: skip
    """``{"watch": {attr: watch_report row}, "structure": structure_kept,
    "structure_reference": {"identity", "last_resort"}, "capacity": cell_capacity}`` on the
    audited rows (``names``: attribute -> class names of its integer codes, for the watch
    rows' rare classes; ``cells``: each row's released-vector code, for the capacity of a
    cell release, None without watch attributes or cells)."""
    from mass.metrics import unnamed as U
    from mass.metrics.rules import FROZEN_READER

    sup = {s: y[s] for s in suppress}
    rows = min(STRUCTURE_ROWS, policy.max_rows or STRUCTURE_ROWS)
    out: dict[str, Any] = {"watch": {}, **dict.fromkeys(("structure", "structure_reference",
                                                         "capacity"))}  # fmt: skip
    if watch:
        out["watch"] = U.watch_report(x, xp, {w: y[w] for w in watch}, sup, seed=policy.seed,
                                      max_rows=policy.max_rows, families=policy.families,
                                      folds=min(policy.folds, 5), extra=extra,
                                      names=names, frozen=FROZEN_READER,
                                      repeats=policy.watch_repeats)  # fmt: skip
        if cells is not None:
            out["capacity"] = U.cell_capacity(cells, {w: y[w] for w in watch})
    codes = joint_codes(sup) if sup else None
    out["structure"] = U.structure_kept(x, xp, codes, seed=policy.seed, max_rows=rows)
    try:
        out["structure_reference"] = U.structure_reference(
            x, sup, {r: y[r] for r in preserve}, seed=policy.seed, max_rows=rows
        )
    except (ConfigError, ValueError, RuntimeError) as e:  # e.g. a class missing in the sample
        out["structure_reference"] = {"error": str(e)}
    return out


def watch_frame(unnamed: dict) -> pd.DataFrame:
    """One row per watch attribute (NaN ``kept``: nothing learnable, not gated)."""
    recs = [{"attribute": a, **{c: (math.nan if w.get(c) is None else w[c])
                                for c in WATCH_COLUMNS[1:]}}
            for a, w in (unnamed.get("watch") or {}).items()]  # fmt: skip
    return pd.DataFrame(recs, columns=list(WATCH_COLUMNS))


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def unnamed_lines(unnamed: dict) -> list[str]:
    """The stdout table's lines: each watch attribute and the label-free structure."""
    lines = []
    for a, w in (unnamed.get("watch") or {}).items():
        dep = ", ".join(f"V({s}) {d['cramers_v']:.2f}, from {s} alone {d['from_s']:.3f}"
                        for s, d in w["dependence"].items())  # fmt: skip
        kept = "nothing learnable" if w["kept"] is None else f"kept {w['kept']:.2f}{spread(w)}"
        rare = ", ".join(f"{c}: {n}" for c, n in (w.get("rare_classes") or {}).items())
        lines.append(f"watch {a}: {kept} (release {w['release']:.3f}, original "
                     f"{w['original']:.3f}, majority {w['majority']:.3f}; {dep})"
                     + (f"; rare classes (fewer rows than folds) {rare}" if rare else ""))  # fmt: skip
    if (cap := capacity_of({"unnamed": unnamed})) is not None:
        lines.append(cap)
    st, ref = unnamed.get("structure"), unnamed.get("structure_reference") or {}
    if st:
        last = ref.get("last_resort")
        tail = ("" if not last else f"; last resort {_f(last['knn_overlap'])} / "
                f"{_f(last['cka'])} / {_f(last['dcor'])}")  # fmt: skip
        lines.append(f"structure kept within S (kNN overlap / CKA / dCor): "
                     f"{_f(st['knn_overlap'])} / {_f(st['cka'])} / {_f(st['dcor'])} "
                     f"(identity 1 / 1 / 1{tail})")  # fmt: skip
    return lines
