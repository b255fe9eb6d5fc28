"""What a release keeps beyond the named preserved attributes (docs/audit.md).

Two kinds of measure, both pure numpy/scikit-learn on arrays the caller already holds:

- :func:`watch_report`: *watch* attributes are labelled attributes that are neither
  suppressed nor preserved; no method sees their labels. Per attribute: the best attacker
  retrained on the original and on the release (the audit's families and folds,
  :func:`mass.metrics.attackers.attack_predictions`), the majority rate, the normalised
  information kept ``(release - majority) / (original - majority)`` and the attribute's
  dependence on each suppressed attribute (Cramér's V and the accuracy reachable from S
  alone), so a loss that S explains reads as such.
- :func:`structure_kept`: label-free measures for when nothing else is labelled, each
  computed *within* the suppressed classes so that removing S does not count as a loss:
  k-NN neighbourhood overlap per S class, and linear CKA and distance correlation of the
  rows with their S-class mean removed. :func:`structure_reference` gives the values of an
  identity release and of the last resort (``leace_project``), so a reader can place a number.

:func:`cell_capacity` says how many bits a cell release can carry at all beside the watch
attributes' entropies (docs/calibration.md, "What M cells can keep"), and
:func:`unnamed_utility` folds the measures into the one number calibration ranks by.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mass.metrics.attackers import attack_predictions, frozen_reader
from mass.metrics.certificate import MIN_ROWS_PER_CELL, is_continuous
from mass.metrics.scores import ATTACKER_FAMILIES, leakage_floor, majority_rate
from mass.metrics.strata import rare_named
from mass.rows import entropy_bits, joint_codes, seeded_rows

# An attribute whose best original attacker beats its majority rate by less than this has
# nothing a release could keep: its normalised figure is undefined (None, "learnable": False).
MIN_SIGNAL = 0.02
# Fold order r of a repeated reading is seeded ``seed + r * REPEAT_STRIDE`` (the attackers use
# ``seed + fold`` inside one order, so orders share no fold seed).
REPEAT_STRIDE = 1009
DCOR_ROWS = 1000  # distance correlation holds two n x n matrices: a seeded subsample


def cramers_v(a, b) -> float:
    """Cramér's V of two label columns (0: independent, 1: one determines the other)."""
    _, ia = np.unique(np.asarray(a), return_inverse=True)
    _, ib = np.unique(np.asarray(b), return_inverse=True)
    ia, ib = ia.reshape(-1), ib.reshape(-1)
    n = ia.size
    r, c = int(ia.max(initial=0)) + 1, int(ib.max(initial=0)) + 1
    if n == 0 or min(r, c) < 2:
        return 0.0
    table = np.zeros((r, c))
    np.add.at(table, (ia, ib), 1.0)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    return float(np.sqrt(chi2 / n / (min(r, c) - 1)))


def normalised_kept(release: float, original: float, majority: float) -> float | None:
    """``(release - majority) / (original - majority)``; None when the original beats the
    majority by less than :data:`MIN_SIGNAL` (nothing learnable to keep)."""
    gain = original - majority
    if gain < MIN_SIGNAL:
        return None
    return float((release - majority) / gain)


def _best(x, y, families, folds, seed) -> dict[str, float]:
    preds = attack_predictions(x, y, families=families, folds=folds, seed=seed)
    return {f: float((p[1.0] == y).mean()) for f, p in preds.items()}


def watch_report(
    x_orig,
    x_rel,
    watch: Mapping[str, np.ndarray],
    suppressed: Mapping[str, np.ndarray],
    *,
    seed: int = 0,
    max_rows: int | None = 2000,
    families: tuple[str, ...] | list[str] = ATTACKER_FAMILIES,
    folds: int = 5,
    extra=None,
    original: Mapping[str, Mapping[str, float]] | None = None,
    names: Mapping[str, object] | None = None,
    frozen: str | None = None,
    repeats: int = 1,
) -> dict[str, dict]:
    """Per watch attribute: attackers retrained on the original and on the release (best
    family and each), majority, normalised information kept, dependence on S and the rare
    classes its attackers met (class name -> rows, fewer than ``folds``: judged by the rule
    of :mod:`mass.metrics.strata`, as the named attributes' are).

    ``extra`` (float [N, m]): the other released columns, encoded; the release's attackers
    see ``[x_rel, extra]`` as the audit's do. ``max_rows`` subsamples the rows once (seeded).
    ``original``: attribute -> family -> accuracy on ``x_orig`` already measured on the same
    rows (calibration measures it once, not per candidate). ``names``: attribute -> class
    names of integer-coded labels (``names[code]``), for the rare-class listing.
    ``frozen`` (a family, e.g. "logreg"): also read each attribute with that family fitted on
    the original rows and applied unchanged to the released embeddings, out of fold
    (``frozen_original``, ``frozen_release``, ``frozen_kept``); ``kept`` is then the lower of
    the retrained and the frozen reading (``retrained_kept`` keeps the former), so a watch
    attribute released inside out counts as lost.
    ``repeats``: read every attacker over that many seeded fold orders of the same rows
    (repeated cross-validation, docs/audit.md): each family's accuracy and the frozen
    reading are the means over the orders, ``kept`` follows from the means, and
    ``kept_range`` gives the lowest and highest ``kept`` of a single order.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"watch_report: repeats must be an integer >= 1, got {repeats!r}")
    x_orig, x_rel = np.asarray(x_orig, np.float32), np.asarray(x_rel, np.float32)
    keep = seeded_rows(len(x_orig), max_rows, seed)
    rows = np.arange(len(x_orig)) if keep is None else keep
    feats = x_rel if extra is None or np.asarray(extra).shape[1] == 0 else np.hstack(
        [x_rel, np.asarray(extra, np.float32)])  # fmt: skip
    x_o, x_r, x_e = x_orig[rows], feats[rows], x_rel[rows]
    s_cols = {s: np.asarray(v)[rows] for s, v in suppressed.items()}
    out: dict[str, dict] = {}
    for name, labels in watch.items():
        y = np.asarray(labels)[rows]
        maj = majority_rate(y)
        seeds = [seed + r * REPEAT_STRIDE for r in range(repeats)]
        reading = _repeated(x_o, x_r, x_e, y, maj, (original or {}).get(name), families,
                            folds, seeds, frozen)  # fmt: skip
        orig, rel, read = reading["original"], reading["release"], reading["frozen"]
        best_o, best_r = max(orig.values()), max(rel.values())
        dep = {s: {"cramers_v": cramers_v(y, ys),
                   "from_s": leakage_floor(y, {s: ys}, folds=folds, seed=seed)}
               for s, ys in s_cols.items()}  # fmt: skip
        from_all = leakage_floor(y, s_cols, folds=folds, seed=seed) if s_cols else maj
        kept = normalised_kept(best_r, best_o, maj)
        explained = normalised_kept(from_all, best_o, maj)
        out[name] = {
            "n": int(y.size), "majority": maj, "original": best_o, "release": best_r,
            "original_by_family": orig, "release_by_family": rel,
            "kept": _lower(kept, read.get("frozen_kept")), "retrained_kept": kept,
            "learnable": kept is not None, "dependence": dep, **read,
            "repeats": repeats, "kept_range": reading["kept_range"],
            "from_all_s": from_all,
            "explained_by_s": None if explained is None else float(np.clip(explained, 0, 1)),
            "rare_classes": rare_named(y, folds, (names or {}).get(name)),
        }  # fmt: skip
    return out


def _repeated(x_o, x_r, x_e, y, maj: float, known, families, folds: int, seeds: list[int],
              frozen: str | None) -> dict:  # fmt: skip
    """Each family's accuracy on the original (``known``: measured already) and on the
    release, and the frozen reading, as means over the fold orders ``seeds``; ``kept_range``
    [lowest, highest] of one order's ``kept`` (None when no order has one)."""
    origs, rels, reads, kepts = [], [], [], []
    for sd in seeds:
        o = dict(known) if known else _best(x_o, y, families, folds, sd)
        r = _best(x_r, y, families, folds, sd)
        rd = _frozen_reading(x_o, x_e, y, maj, frozen, folds, sd) if frozen else {}
        one = normalised_kept(max(r.values()), max(o.values()), maj)
        origs.append(o)
        rels.append(r)
        reads.append(rd)
        kepts.append(_lower(one, rd.get("frozen_kept")))
    read = {}
    if frozen:
        fo, fr = (float(np.mean([d[k] for d in reads])) for k in ("frozen_original",
                                                                    "frozen_release"))  # fmt: skip
        read = {"frozen_original": fo, "frozen_release": fr,
                "frozen_kept": normalised_kept(fr, fo, maj)}  # fmt: skip
    defined = [k for k in kepts if k is not None]
    return {"original": _mean_of(origs), "release": _mean_of(rels), "frozen": read,
            "kept_range": [min(defined), max(defined)] if defined else None}  # fmt: skip


def _mean_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Family -> mean accuracy over the fold orders' readings."""
    return {f: float(np.mean([d[f] for d in runs])) for f in runs[0]}


def _frozen_reading(x_o, x_e, y, majority: float, family: str, folds: int,
                    seed: int) -> dict:  # fmt: skip
    """A model fitted on the original rows, applied unchanged to the release (out of fold)."""
    on_x, on_xp = frozen_reader(x_o, x_e, y, family=family, folds=folds, seed=seed)
    fo, fr = float((on_x == y).mean()), float((on_xp == y).mean())
    return {"frozen_original": fo, "frozen_release": fr,
            "frozen_kept": normalised_kept(fr, fo, majority)}  # fmt: skip


def _lower(a: float | None, b: float | None) -> float | None:
    """The lower of two readings; one that is undefined (None) does not count."""
    return a if b is None else b if a is None else min(a, b)


def _neighbours(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's ``k`` nearest rows by Euclidean distance (itself excluded): on
    unit rows the cosine ranking, and blind to a shift of the whole group."""
    sq = (x * x).sum(1)
    dist = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    np.fill_diagonal(dist, np.inf)
    return np.argpartition(dist, k - 1, axis=1)[:, :k]


def knn_overlap(x_orig, x_rel, groups, k: int = 10) -> float:
    """Mean share of each row's ``k`` nearest neighbours in the original that are still among
    its ``k`` nearest in the release, neighbours sought within the row's group."""
    shared, total = 0, 0
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        kk = min(k, idx.size - 1)
        if kk < 1:
            continue
        a, b = _neighbours(x_orig[idx], kk), _neighbours(x_rel[idx], kk)
        shared += sum(np.intersect1d(ra, rb).size for ra, rb in zip(a, b, strict=True))
        total += idx.size * kk
    return float(shared / total) if total else 1.0


def _within(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``x`` less its group mean (float64): what is left once S's class means are gone."""
    x = np.asarray(x, np.float64)
    n_g = int(groups.max(initial=0)) + 1
    sums = np.zeros((n_g, x.shape[1]))
    np.add.at(sums, groups, x)
    counts = np.maximum(np.bincount(groups, minlength=n_g), 1)[:, None]
    return x - (sums / counts)[groups]


def linear_cka(x, y) -> float:
    """Linear centred kernel alignment of two row-aligned matrices (1: same up to rotation
    and scale; 0: no linear relation; 0 when either is constant)."""
    x = np.asarray(x, np.float64) - np.mean(x, 0)
    y = np.asarray(y, np.float64) - np.mean(y, 0)
    den = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(np.linalg.norm(y.T @ x) ** 2 / den) if den > 1e-24 else 0.0


def _centred_distances(x: np.ndarray) -> np.ndarray:
    sq = (x * x).sum(1)
    d = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0))
    return d - d.mean(0) - d.mean(1)[:, None] + d.mean()


def distance_correlation(x, y) -> float:
    """Székely's (biased, V-statistic) distance correlation of two row-aligned matrices."""
    a = _centred_distances(np.asarray(x, np.float64))
    b = _centred_distances(np.asarray(y, np.float64))
    vxy, vxx, vyy = (a * b).mean(), (a * a).mean(), (b * b).mean()
    if vxx <= 1e-24 or vyy <= 1e-24:
        return 0.0
    return float(np.sqrt(max(vxy, 0.0) / np.sqrt(vxx * vyy)))


def structure_kept(x_orig, x_rel, s_codes=None, *, k: int = 10, seed: int = 0,
                   max_rows: int | None = 2000) -> dict:  # fmt: skip
    """Label-free structure the release keeps, within the suppressed classes ``s_codes``
    (one code per row, e.g. :func:`mass.rows.joint_codes` of S; None: one class)."""
    x_orig, x_rel = np.asarray(x_orig, np.float64), np.asarray(x_rel, np.float64)
    groups = np.zeros(len(x_orig), np.int64) if s_codes is None else np.unique(
        np.asarray(s_codes), return_inverse=True)[1].reshape(-1)  # fmt: skip
    keep = seeded_rows(len(x_orig), max_rows, seed)
    if keep is not None:
        x_orig, x_rel, groups = x_orig[keep], x_rel[keep], groups[keep]
    wo, wr = _within(x_orig, groups), _within(x_rel, groups)
    sub = seeded_rows(len(wo), DCOR_ROWS, seed + 1)
    do, dr = (wo, wr) if sub is None else (wo[sub], wr[sub])
    return {
        "rows": int(len(x_orig)), "k": int(k), "within_s": s_codes is not None,
        "knn_overlap": knn_overlap(x_orig, x_rel, groups, k),
        "cka": linear_cka(wo, wr),
        "dcor": distance_correlation(do, dr),
    }  # fmt: skip


def last_resort_release(x, suppressed: Mapping[str, np.ndarray],
                        preserved: Mapping[str, np.ndarray], *, seed: int = 0) -> np.ndarray:  # fmt: skip
    """``x`` reduced to what the last resort keeps (``leace_project``): the unit-norm rows
    projected onto the span of R's Fisher discriminant directions fitted on these rows, centred
    at their mean and renormalised. The method erases S given R first; that step changes
    nothing the reference measures outside R's span, and leaving it out keeps the audit free of
    training code (tests/layout/test_audit_imports.py). ``suppressed`` and ``seed`` are kept for
    the callers' signature; needs at least one preserved attribute."""
    import torch

    from mass.metrics.discriminant import discriminant_basis

    del suppressed, seed
    xt = torch.as_tensor(np.asarray(x, np.float32)).double()
    xt = xt / xt.norm(dim=1, keepdim=True).clamp_min(1e-12)
    basis, mu = discriminant_basis(xt, {a: np.asarray(v) for a, v in preserved.items()}, 1e-3)
    out = (xt - mu) @ basis @ basis.T
    return (out / out.norm(dim=1, keepdim=True).clamp_min(1e-12)).float().numpy()


def structure_reference(x_orig, suppressed: Mapping[str, np.ndarray],
                        preserved: Mapping[str, np.ndarray], *, k: int = 10, seed: int = 0,
                        max_rows: int | None = 2000) -> dict[str, dict | None]:  # fmt: skip
    """:func:`structure_kept` of an identity release and of the last resort on these rows
    (``last_resort`` None without a preserved attribute: there is no last resort then)."""
    x_orig = np.asarray(x_orig, np.float32)
    keep = seeded_rows(len(x_orig), max_rows, seed)
    if keep is not None:
        x_orig = x_orig[keep]
        suppressed = {a: np.asarray(v)[keep] for a, v in suppressed.items()}
        preserved = {a: np.asarray(v)[keep] for a, v in preserved.items()}
    codes = joint_codes(dict(suppressed)) if suppressed else None
    kw = dict(k=k, seed=seed, max_rows=None)
    last = None
    if preserved:
        x_last = last_resort_release(x_orig, suppressed, preserved, seed=seed)
        last = structure_kept(x_orig, x_last, codes, **kw)
    return {"identity": structure_kept(x_orig, x_orig, codes, **kw), "last_resort": last}


STRUCTURE_MEASURES = ("knn_overlap", "cka", "dcor")


def cell_capacity(cells, watch: Mapping[str, np.ndarray], *,
                  min_rows_per_cell: int = MIN_ROWS_PER_CELL) -> dict | None:  # fmt: skip
    """What a cell release can carry about the ``watch`` attributes (labels on the audited
    rows), or None for a continuous release (more than one distinct vector per
    ``min_rows_per_cell`` rows, as :mod:`mass.metrics.certificate` counts) or no watch.

    ``cells`` is each audited row's released vector's code (distinct vectors = cells). M
    cells carry at most log2 M bits about a row, so watch attributes that are independent of
    one another keep at most that many bits of their entropies in all (docs/calibration.md,
    "What M cells can keep"): ``bits_max`` (log2 M, exact), ``bits_rows`` (the cells'
    plug-in entropy on these rows), ``watch_bits`` per attribute and their sum, and
    ``watch_fits`` (the sum within ``bits_max``: when False, no release of these cells can
    keep every independent watch attribute whole)."""
    cells = np.asarray(cells).ravel()
    m = int(np.unique(cells).size)
    if not watch or cells.size == 0 or is_continuous(m, cells.size, min_rows_per_cell):
        return None
    bits = {w: round(entropy_bits(y), 6) for w, y in watch.items()}
    total = round(sum(bits.values()), 6)
    cap = round(float(np.log2(m)), 6)
    return {"cells": m, "rows": int(cells.size), "bits_max": cap,
            "bits_rows": round(entropy_bits(cells), 6), "watch_bits": bits,
            "watch_bits_total": total, "watch_fits": bool(total <= cap)}  # fmt: skip


def unnamed_utility(watch: Mapping[str, dict] | None = None,
                    structure: Mapping | None = None) -> float | None:  # fmt: skip
    """The one number calibration ranks by (docs/calibration.md): the smallest normalised
    information kept over the learnable watch attributes when there are any, else the mean of
    the label-free measures; None when neither was measured."""
    kept = [w["kept"] for w in (watch or {}).values() if w.get("kept") is not None]
    if kept:
        return float(min(kept))
    if structure:
        return float(np.mean([structure[m] for m in STRUCTURE_MEASURES]))
    return None
