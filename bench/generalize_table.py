"""One dataset, every method side by side (issue 22; docs/generalize.md): bench/generalize.py's
table code, kept apart so a test can run it on a tiny synthetic set.

Methods, each fitted on the training rows and judged on the held-out release rows (the
transductive repair excepted): ``identity``; ``calibrated`` (what `mass train` chose, loaded
from its run); ``last resort`` (``leace_project``: R's discriminant span); ``leace + noise``
(one LEACE round, release noise at the smallest level calibration found private for it,
else 1.2, the largest it tries); ``ot-repair`` (held out: its class predictor and transport fitted on the
training rows, as the product applies it); ``ot-repair+cells`` (the same, each row released as
the nearest of ~n/(10 k) k-means centres: calibration's candidate); ``ot-repair+cells|R`` (the
cells within each class of R, a stored predictor picking it); ``ot-repair+partition|R`` and
``ot-repair+partition2|R`` (rank cells of one partition within each class of R: common bins
along 1 or 2 axes of the covariance within S, two passes); ``ot-repair (transductive)``: the transport
fitted on the release rows themselves with their true S (a batch job that knows S for the
rows it releases: total repair, S-independent by construction).

Columns are the product's own measures: the gate's rule (:func:`mass.metrics.attribute_report`
under the policy, retrained attackers and a frozen one trained on the original training
rows) on the release and on its key-stripped view (the deterministic output, noise removed),
R kept, :func:`mass.metrics.unnamed.watch_report` per watch attribute as the audit reads it
(the frozen reader too, over the policy's ``watch_repeats`` fold orders) and
:func:`mass.metrics.unnamed.structure_kept` within S classes.
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pyarrow as pa
import torch

# Targets of issue 22 ("what it must show")
R_KEPT = 0.9  # named R keeps >= 0.9 of the original
WEAK_V = 0.2  # a watch attribute with Cramér's V <= 0.2 to every S is "weakly tied"
WATCH_KEPT = 0.8  # ... and keeps >= 0.8 of its normalised information
FALLBACK_NOISE = 1.2  # the largest level calibration tries (the demo's LEACE + noise)


class FrozenJudge:
    """An MLP trained on the original training rows (unit norm) for one S, applied unchanged
    to the release: the frozen-classifier number, reported beside the retrained ones."""

    def __init__(self, x, y, seed: int = 0):
        from sklearn.neural_network import MLPClassifier

        self.model = MLPClassifier((128,), max_iter=300, random_state=seed).fit(x, y)
        self.k = int(np.max(y)) + 1

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        p = np.full((len(x), self.k), 1e-9)
        p[:, self.model.classes_] += self.model.predict_proba(x.numpy())
        return torch.from_numpy(np.log(p))


def dataset(x, labels: dict[str, np.ndarray]):
    from mass.io import EmbeddingDataset

    return EmbeddingDataset(ids=pa.array(np.arange(len(x), dtype=np.int64)),
                            x=np.asarray(x, np.float32), labels=dict(labels))  # fmt: skip


def strip_noise(model):
    """The same fitted modifier without release noise (what the owner key lets one compute)."""
    from mass.calibrate import with_output_noise
    from mass.modifiers import ChainModifier, GaussianNoiseModifier

    if isinstance(model, ChainModifier):
        parts = [p for p in model.parts if not isinstance(p, GaussianNoiseModifier)]
        model = parts[0] if len(parts) == 1 else ChainModifier.of(*parts)
    return with_output_noise(model, 0.0)


def fitted(method: str, train, suppress, preserve, params=None):
    from mass.methods import get_method

    fit = get_method(method).fit(train, suppress=list(suppress), preserve=list(preserve),
                                 params=params or {}, progress=False)  # fmt: skip
    return fit.modifier


def transductive_repair(xt: np.ndarray, s_codes: np.ndarray, seed: int = 0) -> np.ndarray:
    """Sliced total repair (mass.methods.ot_repair's transport, default knobs) fitted on the
    rows it releases, each moved with its true S class; output L2-normalised."""
    from mass.methods.ot_repair.params import RepairParams
    from mass.methods.ot_repair.transport import fit_transport
    from mass.modifiers import l2_normalize

    p = RepairParams(seed=seed)
    cls = torch.as_tensor(np.unique(s_codes, return_inverse=True)[1].reshape(-1))
    k = int(cls.max()) + 1
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        _, out = fit_transport(torch.as_tensor(xt), cls, k, gen, p)
    return l2_normalize(out).numpy()


def releases(train, xt, seeds, s_codes, suppress, preserve, calibrated=None,
             leace_noise: float | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:  # fmt: skip
    """method -> (release, key-stripped release, note). ``calibrated``: (modifier, name)."""
    from mass.calibrate import apply, with_output_noise
    from mass.calibrate.space import SEARCH_SPACE, ordered

    def run(model):  # the same array twice when the model adds no noise
        xp, xd = apply(model, xt, seeds), apply(strip_noise(model), xt, seeds)
        return (xp, xp) if np.array_equal(xp, xd) else (xp, xd)

    out = {"identity": (xt, xt, "the original rows")}
    if calibrated is not None:
        out["calibrated"] = (*run(calibrated[0]), calibrated[1])
    last = fitted("leace_project", train, suppress, preserve)
    out["last resort"] = (*run(last), "leace|R+R-span")
    noise = FALLBACK_NOISE if leace_noise is None else leace_noise
    leace = fitted("leace_iterated", train, suppress, preserve,
                   {"given_preserved": False, "rounds": 1})  # fmt: skip
    src = "fallback: the largest level" if leace_noise is None else "calibration's smallest private"
    out["leace + noise"] = (*run(with_output_noise(leace, noise)), f"noise {noise} ({src})")
    ot = fitted("ot_repair", train, suppress, preserve)
    out["ot-repair"] = (*run(ot), "fitted on the training rows")
    cells = {
        "ot-repair+cells": "fitted on the training rows, released in cells",
        "ot-repair+cells|R": "cells within each class of R",
        "ot-repair+partition|R": "one partition within each class of R (1 axis)",
        "ot-repair+partition2|R": "one partition within each class of R (2 axes)",
        "ot-repair+partition1|R": "one partition within each class of R, one repair pass",
        "ot-repair+balanced2|R": "two-axis partition, held-out balanced merging",
        "ot-repair+certified|R": "two-axis partition, the cells these rows can certify",
    }
    cell_policy = None  # params.yaml's policy, read once, for the candidates sizing their cells
    for c in ordered(SEARCH_SPACE, preserve):  # calibration's own candidates, as it runs them
        if c.name in cells:
            params = dict(c.params)
            if c.certified_cells:  # as calibration sets it, for this release's rows
                from mass.audit.policy import load_policy
                from mass.calibrate.space import certified_cell_count

                if cell_policy is None:
                    cell_policy = load_policy("params.yaml")
                params["cell_count"] = certified_cell_count(
                    train.labels, suppress, cell_policy, len(xt)
                )
                if params["cell_count"] < 2:
                    continue
            model = fitted(c.method, train, suppress, preserve, params)
            out[c.name] = (*run(model), cells[c.name])
    tr = transductive_repair(xt, s_codes)
    out["ot-repair (transductive)"] = (tr, tr, "fitted on the release rows, true S")
    return out


def _s_row(r) -> dict:
    worst = max(r.ci_high, key=lambda j: r.ci_high[j] - r.baseline)
    return {"worst_judge": worst, "worst": r.accuracies[worst], "ci_high": r.ci_high[worst],
            "limit": r.baseline + r.margins[worst], "original": r.original,
            "retrained": max(r.attackers.values()),
            "frozen": r.frozen_xprime, "frozen_x": r.frozen_x, "ok": r.passed,
            "judges": dict(r.ci_high), "balanced_judges": dict(r.balanced_ci_high),
            "balanced_limit": r.balanced_baseline + min(r.margins.values())}  # fmt: skip


def judge(x, xp, xd, labels, suppress, preserve, watch, policy, frozen, watch_orig=None):
    """The measured row of one release: S on the release and key-stripped, R, watch, structure."""
    from mass.metrics import attribute_report
    from mass.metrics.rules import FROZEN_READER
    from mass.metrics.unnamed import structure_kept, watch_report
    from mass.rows import joint_codes

    kw = dict(families=policy.families, folds=policy.folds, seed=policy.seed,
              max_rows=policy.max_rows, confidence=policy.confidence, curve=False)  # fmt: skip
    pres = {r: labels[r] for r in preserve}
    row: dict = {"S": {}, "S_key": {}, "R": {}}
    for s in suppress:
        for key, rel in (("S", xp), ("S_key", xd)):
            if key == "S_key" and xd is xp:
                row[key][s] = row["S"][s]
                continue
            r = attribute_report(s, labels[s], x, rel, role="suppressed", preserved=pres,
                                 margins=policy.margins(s), frozen=frozen.get(s), **kw)  # fmt: skip
            row[key][s] = _s_row(r)
    for a in preserve:
        r = attribute_report(a, labels[a], x, xp, role="preserved",
                             min_fraction=policy.fraction(a), **kw)  # fmt: skip
        row["R"][a] = {"best": r.worst, "original": r.original, "kept": r.retention}
    sup = {s: labels[s] for s in suppress}
    row["watch"] = watch_report(x, xp, {w: labels[w] for w in watch}, sup, seed=policy.seed,
                                max_rows=policy.max_rows, families=policy.families,
                                folds=min(policy.folds, 5), original=watch_orig,
                                frozen=FROZEN_READER, repeats=policy.watch_repeats)  # fmt: skip
    row["structure"] = structure_kept(x, xp, joint_codes(sup), seed=policy.seed)
    return row


def verdict(row: dict) -> dict:
    """The issue's targets on one row: S within the policy with the key stripped, each R kept
    >= 0.9, each learnable watch attribute with V <= 0.2 to every S kept >= 0.8."""
    s_ok = all(v["ok"] for v in row["S_key"].values())
    r_ok = all((v["kept"] or 0) >= R_KEPT for v in row["R"].values())
    weak = [w for w, v in row["watch"].items() if v["learnable"]
            and max(d["cramers_v"] for d in v["dependence"].values()) <= WEAK_V]  # fmt: skip
    w_ok = all(row["watch"][w]["kept"] >= WATCH_KEPT for w in weak)
    return {"s_key_ok": s_ok, "s_ok": all(v["ok"] for v in row["S"].values()), "r_ok": r_ok,
            "weak_watch": weak, "watch_ok": w_ok, "all": s_ok and r_ok and w_ok}  # fmt: skip


def _digest(xp: np.ndarray, xd: np.ndarray) -> str:
    """One release's identity: its rows and its key-stripped rows, byte for byte."""
    h = hashlib.sha256()
    for a in (xp, xd):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def evaluate(x, xs: dict, labels, suppress, preserve, watch, policy, frozen) -> dict[str, dict]:
    """Every release of ``xs`` (method -> (release, key-stripped, note)) judged; the watch
    attributes' original attackers measured once."""
    from mass.metrics.unnamed import watch_report

    sup = {s: labels[s] for s in suppress}
    base = watch_report(x, x, {w: labels[w] for w in watch}, sup, seed=policy.seed,
                        max_rows=policy.max_rows, families=policy.families,
                        folds=min(policy.folds, 5), repeats=policy.watch_repeats)  # fmt: skip
    orig = {w: v["original_by_family"] for w, v in base.items()}
    out: dict[str, dict] = {}
    judged: dict[str, str] = {}  # digest of (release, key-stripped) -> the first method
    for name, (xp, xd, note) in xs.items():
        key = _digest(xp, xd)
        if key in judged:  # byte for byte a release already judged (e.g. the calibrated
            # choice and its family's row): the same seeded judges give the same row
            row = copy.deepcopy(out[judged[key]])
            row["same_release_as"] = judged[key]
        else:
            row = judge(x, xp, xd, labels, suppress, preserve, watch, policy, frozen, orig)
            judged[key] = name
        row.update(note=note, noisy=xd is not xp)
        row["verdict"] = verdict(row)
        out[name] = row
    return out


def _f(v, fmt=".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _s_cell(v: dict) -> str:
    mark = "" if v["ok"] else " **fail**"
    if not v["ok"] and v["ci_high"] <= v["limit"]:  # the highest accuracy bound is under it
        mark += " (balanced bound)"
    return f"{v['worst_judge']} {v['ci_high']:.3f} / {v['limit']:.3f}{mark}"


def markdown(rows: dict[str, dict], suppress, preserve, watch) -> str:
    """One table: a row per method, the columns of docs/generalize.md."""
    head = (["method"] + [f"{s}: release (<= limit)" for s in suppress]
            + [f"{s}: key stripped" for s in suppress] + [f"{s}: frozen" for s in suppress]
            + [f"{r} kept" for r in preserve] + [f"{w} kept" for w in watch]
            + ["kNN / CKA / dCor within S", "targets"])  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        v = r["verdict"]
        fails = [k for k, ok in (("S key", v["s_key_ok"]), ("R", v["r_ok"]),
                                 ("watch", v["watch_ok"])) if not ok]  # fmt: skip
        st, noisy = r["structure"], r["noisy"] and r["S_key"] != r["S"]
        cells = ([f"{name} ({r['note']})"] + [_s_cell(r["S"][s]) for s in suppress]
                 + [_s_cell(r["S_key"][s]) if noisy else "(no noise)" for s in suppress]
                 + [_f(r["S"][s]["frozen"]) for s in suppress]
                 + [_f(r["R"][a]["kept"], ".2f") for a in preserve]
                 + [_f(r["watch"][w]["kept"], ".2f") for w in watch]
                 + [f"{st['knn_overlap']:.2f} / {st['cka']:.2f} / {st['dcor']:.2f}",
                    "met" if v["all"] else "not met: " + ", ".join(fails)])  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def dependence_lines(rows: dict[str, dict], watch) -> list[str]:
    """Each watch attribute's dependence on S and its original attackers (from identity)."""
    ident = rows["identity"]["watch"]
    out = []
    for w in watch:
        v = ident[w]
        dep = ", ".join(f"V({s}) {d['cramers_v']:.2f}, from {s} alone {d['from_s']:.3f}"
                        for s, d in v["dependence"].items())  # fmt: skip
        learn = "" if v["learnable"] else " (nothing learnable: not judged)"
        out.append(f"- `{w}`: original {v['original']:.3f}, majority {v['majority']:.3f}; "
                   f"{dep}; explained by S {_f(v['explained_by_s'], '.2f')}{learn}")  # fmt: skip
    return out


def ceiling(rows: dict[str, dict]) -> str:
    """Which methods meet the targets; else the measured ceiling: the best R kept by a method
    private with the key stripped, and the best weakly tied watch figure among those that
    also keep R."""
    met = [m for m, r in rows.items() if r["verdict"]["all"]]
    if met:
        return "Targets met by: " + ", ".join(met) + "."
    private = {m: r for m, r in rows.items() if r["verdict"]["s_key_ok"]}
    if not private:
        over = {m: max(v["ci_high"] - v["limit"] for v in r["S_key"].values())
                for m, r in rows.items() if m != "identity"}  # fmt: skip
        m = min(over, key=over.get)
        return ("Targets not met: no method keeps S within the policy with the key stripped; "
                f"the closest is {m}, its worst judge's upper bound {over[m]:+.3f} over the "
                "limit.")  # fmt: skip

    def r_min(r):
        return min((v["kept"] or 0.0) for v in r["R"].values()) if r["R"] else 1.0

    best_r = max(private, key=lambda m: r_min(private[m]))
    out = (f"Targets not met. Ceiling with S private (key stripped): R kept "
           f"{r_min(private[best_r]):.2f} ({best_r})")  # fmt: skip
    keep_r = {m: r for m, r in private.items() if r["verdict"]["r_ok"]}
    weak = rows["identity"]["verdict"]["weak_watch"]
    if keep_r and weak:

        def w_min(r):
            return min(r["watch"][w]["kept"] for w in weak)

        best_w = max(keep_r, key=lambda m: w_min(keep_r[m]))
        out += (f"; weakly tied watch ({', '.join(weak)}) kept {w_min(keep_r[best_w]):.2f} "
                f"at best with R kept ({best_w})")  # fmt: skip
    elif weak:
        out += "; no private method keeps R, so no watch figure is within the targets"
    return out + "."
