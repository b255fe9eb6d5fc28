"""The column encoder's contracts (mass/audit/columns.py, issue 37), each where an attacker
needs it: suffix keys read a string's END (a suffix-only proxy such as ``00001F``), integer
columns keep their order (ids assigned in blocks per class), and a training row's per-value
statistics never include its own label (a column unrelated to the label stays at chance)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mass.audit.columns import Statistics, column_codes
from mass.metrics.attackers import attack_predictions


def _same(a: np.ndarray) -> np.ndarray:
    return a[:, None] == a[None, :]


def _read_by_statistics(arr: pa.Array, y: np.ndarray) -> float:
    """Accuracy of a logistic regression that sees only the column's label statistics."""
    stats = Statistics.of([column_codes(arr)])
    pred = attack_predictions(np.zeros((len(y), 1), np.float32), y, families=("logreg",),
                              folds=5, seed=0, stats=stats)["logreg"][1.0]  # fmt: skip
    return float((pred == y).mean())


def test_suffix_keys_group_rows_by_their_last_characters():
    values = ["AB-00001F", "CD-00002M", "EF-00013F", "AB-00004M", "zz1F"]
    keys = column_codes(pa.array(values)).keys
    for n in (1, 2, 3):
        ends = np.array([v[-n:] for v in values])
        assert (_same(keys[f"suffix{n}"]) == _same(ends)).all(), n


def test_a_suffix_only_proxy_is_read_through_its_suffix_statistics():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 600)
    values = [f"{rng.integers(0, 10**5):05d}{'FM'[c]}" for c in y]  # label only at the end
    assert _read_by_statistics(pa.array(values), y) > 0.95


def test_integer_columns_keep_their_order_and_blocks_per_class_are_read():
    v = np.array([50, 10, 30, 20], np.int64)
    codes = column_codes(pa.array([50, None, 30, 20], pa.int64()))
    assert np.array_equal(codes.order[[0, 2, 3]], v[[0, 2, 3]]) and np.isnan(codes.order[1])
    rng = np.random.default_rng(1)
    ids = np.sort(rng.choice(10**6, size=800, replace=False))
    y = (ids // 25_000) % 2  # ids assigned in blocks per class: only the order tells
    assert _read_by_statistics(pa.array(ids), y) > 0.9


def test_training_rows_statistics_never_include_their_own_label():
    rng = np.random.default_rng(2)
    n = 1000
    y = rng.integers(0, 2, n)
    unique = column_codes(pa.array(rng.permutation(n).astype(np.int64) * 7919))
    stats = Statistics.of([unique])
    train, test = np.arange(800), np.arange(800, n)
    tr, _ = stats.split(y, train, test, folds=5, seed=0)
    # each value occurs once: with its own label in, the value key's class-1 frequency would
    # be (1 + 2 prior) / 3 for a class-1 row, (2 prior) / 3 for a class-0 row
    own = y[train]
    gap = np.abs(tr[own == 1].mean(axis=0) - tr[own == 0].mean(axis=0)).max()
    assert gap < 0.05, gap


def test_ids_past_2_53_and_uint64_are_read_exactly():
    """Hashed or snowflake ids past 2**53 (int64) or 2**63 (uint64) are judged, not an
    ArrowInvalid from a float64 cast (before: the gate's traceback after the whole job), and
    read exactly: a label in the ids' lowest bit, below float64's resolution there, is found
    by the bit and parity features, and the order ranks ids that a float64 would tie."""
    from mass.audit.data import encode_columns

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 600)
    for typ, base in ((pa.int64(), 2**53 + 1), (pa.uint64(), 2**64 - 2**20)):
        ids = np.uint64(base) + 2 * np.arange(600, dtype=np.uint64) + y.astype(np.uint64)
        arr = pa.array(ids, pa.uint64()).cast(typ)  # the label is the lowest bit
        codes = column_codes(arr)
        assert np.unique(codes.order).size == 600  # float64 would tie neighbours
        assert _read_by_statistics(arr, y) > 0.95
        assert encode_columns({"id": arr}, 600).shape[0] == 600
        few = pa.array([base, base + 1, None, base], typ)  # <= max_levels values: one-hot
        assert encode_columns({"id": few}, 4).tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1],
                                                           [1, 0, 0]]  # fmt: skip


def test_labels_join_ids_of_another_type_by_their_exact_text():
    """A labels table whose ids are text joins integer release ids only where the text is the
    integer's own ("7"), never a padded or spaced look-alike ("007", " 8"), and a text id that
    is no integer does not stop the others from joining (before: "007" was cast to 7, and one
    such value made every row unmatched)."""
    from mass.audit.data import positions

    release = pa.array([7, 8, 9, 10], pa.int64())
    labels = pa.array(["007", " 8", "9", "x10", "10"])
    assert positions(release, labels).tolist() == [-1, -1, 2, 4]
    assert positions(pa.array(["9", "007"]), pa.array([7, 9], pa.int32())).tolist() == [1, -1]
    assert positions(pa.array([7, 9], pa.int32()), pa.array([9, 7], pa.int64())).tolist() == [1, 0]
