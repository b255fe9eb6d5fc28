"""bench/generalize_table.py on a tiny synthetic set: every method judged side by side, the
identity release keeps everything (and fails privacy), the last resort loses a watch
attribute independent of S, the transductive total repair keeps it and R (issue 22)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.generalize_table import FrozenJudge, dataset, evaluate, markdown, releases
from mass.audit.policy import policy_from_dict
from mass.noise import row_seeds

# ot-repair+certified|R is left out here: 200 release rows certify no two cells
METHODS = ["identity", "last resort", "leace + noise", "ot-repair", "ot-repair+cells",
           "ot-repair+cells|R", "ot-repair+partition|R", "ot-repair+partition1|R",
           "ot-repair+partition2|R", "ot-repair+balanced2|R", "ot-repair (transductive)"]  # fmt: skip


def _synthetic(n: int, seed: int):
    """S shifts dimension 0, R dimension 1, the watch attribute W (independent of both)
    dimensions 2-3; the rest is noise."""
    rng = np.random.default_rng(seed)
    y = {a: rng.integers(0, 2, n) for a in ("s", "r", "w")}
    x = rng.normal(size=(n, 8)) * 0.5
    x[:, 0] += 2.0 * y["s"]
    x[:, 1] += 2.0 * y["r"]
    x[:, 2:4] += 2.0 * y["w"][:, None]
    return x.astype(np.float32), y


@pytest.fixture(scope="module")
def rows():
    import pyarrow as pa

    from mass.rows import normalize_rows

    x, y = _synthetic(600, 0)
    tr, te = np.arange(400), np.arange(400, 600)
    policy = policy_from_dict({"families": ["logreg", "knn"], "folds": 3, "curve": False})
    train = dataset(x[tr], {"s": y["s"][tr], "r": y["r"][tr]})
    xt = normalize_rows(x[te]).astype(np.float32)
    yt = {k: v[te] for k, v in y.items()}
    xs = releases(train, xt, row_seeds(pa.array(te.astype(np.int64))), yt["s"], ["s"], ["r"],
                  None, 0.3)  # fmt: skip
    frozen = {"s": FrozenJudge(normalize_rows(x[tr]), y["s"][tr])}
    return evaluate(xt, xs, yt, ["s"], ["r"], ["w"], policy, frozen)


@pytest.mark.slow
def test_every_method_has_every_column(rows):
    assert list(rows) == METHODS
    for r in rows.values():
        assert set(r["S"]) == set(r["S_key"]) == {"s"} and set(r["R"]) == {"r"}
        assert set(r["watch"]) == {"w"} and {"knn_overlap", "cka", "dcor"} <= set(r["structure"])
        assert r["S"]["s"]["frozen"] is not None
    assert rows["leace + noise"]["noisy"] and not rows["last resort"]["noisy"]
    md = markdown(rows, ["s"], ["r"], ["w"]).splitlines()
    assert len(md) == 2 + len(METHODS) and all(
        line.replace("\\|", "").count("|") == md[0].count("|") for line in md
    )


def test_identity_keeps_everything_and_fails_privacy(rows):
    ident = rows["identity"]
    assert ident["watch"]["w"]["kept"] == pytest.approx(1.0)
    assert ident["R"]["r"]["kept"] == pytest.approx(1.0)
    assert ident["structure"]["knn_overlap"] == pytest.approx(1.0)
    assert not ident["S"]["s"]["ok"] and not ident["verdict"]["all"]
    # the identity release's best retrained attacker is the original's
    assert ident["S"]["s"]["retrained"] == pytest.approx(ident["S"]["s"]["original"])


def test_last_resort_loses_an_independent_watch_attribute_repair_keeps_it(rows):
    w = rows["identity"]["watch"]["w"]
    assert w["dependence"]["s"]["cramers_v"] <= 0.2  # weakly tied: the target applies
    last, repair = rows["last resort"], rows["ot-repair (transductive)"]
    assert last["watch"]["w"]["kept"] < 0.3 and not last["verdict"]["watch_ok"]
    assert repair["watch"]["w"]["kept"] >= 0.8 and repair["R"]["r"]["kept"] >= 0.9
    # (its privacy is not asserted: fitted on 200 rows, its out-of-fold attackers read S
    # below chance and the re-mapped judges above the limit; docs/generalize.md)


def test_a_release_identical_byte_for_byte_to_one_judged_is_not_judged_again(monkeypatch):
    """The calibrated choice and its family's row are often the same release: judged once,
    its row copied (``same_release_as``); a release differing in one value is judged."""
    import bench.generalize_table as gt

    x, y = _synthetic(90, 1)
    calls = []

    def judge(x, xp, xd, *a):
        calls.append(xp)
        return {"S": {}, "R": {}, "watch": {}, "S_key": {}, "structure": {}, "n": len(calls)}

    monkeypatch.setattr(gt, "judge", judge)
    monkeypatch.setattr(gt, "verdict", lambda row: {"all": False})
    policy = policy_from_dict({"families": ["logreg"], "folds": 3, "curve": False})
    other = x.copy()
    other[5, 3] += 1e-3
    xs = {"a": (x, x, "first"), "b": (x.copy(), x.copy(), "second"), "c": (other, other, "")}
    rows = gt.evaluate(x, xs, y, ["s"], ["r"], [], policy, {})
    assert len(calls) == 2 and [rows[k]["n"] for k in "abc"] == [1, 1, 2]
    assert rows["b"]["same_release_as"] == "a" and rows["b"]["note"] == "second"
    assert "same_release_as" not in rows["a"] and "same_release_as" not in rows["c"]
