"""Real-data shapes, table-driven: `mass train` (defaults = calibration) and `mass audit` reach
a verdict - pass, fail or a named refusal, never a traceback - and the reports list the rare
classes (the rule: mass.metrics.strata, docs/audit.md "Rare classes").

One row of SHAPES per shape. A shape gives the label columns of the training table and of the
audited table (``labels(rng, n) -> {column: values}``), the attributes, and what must come out:
``refusal`` (the exact MassError subclass, for a shape nothing can judge, e.g. null labels)
or, per attribute, the classes audit.json / calibration.json must list as rare.
To add a shape, add a Shape(...) row; nothing else changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass import errors as E
from mass.embeddings import embedding_array

DIM = 8
ROWS = 240
AUDIT_PARAMS = {"audit": {"families": ["logreg", "mlp", "gboost"], "folds": 5,
                          "curve": True}}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    name: str
    labels: Callable[[np.random.Generator, int], dict]  # training / audited label columns
    suppress: str
    preserve: str = ""
    val: Callable[[np.random.Generator, int], dict] | None = None  # --val labels, if any
    refusal: type | None = None  # train and audit end in exactly this error
    train_refusal: type | None = None  # only `mass train` refuses (e.g. an unseen class)
    rare: dict[str, set] = field(default_factory=dict)  # attribute -> classes listed as rare
    joint_rare: tuple[str, ...] = ()  # calibration.json's rare S x R cells ("s=1, r=0")
    rows: int = ROWS
    watch: str = ""  # a --watch attribute (neither suppressed nor preserved)
    # the audited S has a class too small for any release to pass (its balanced bound at
    # chance is over the limit): audit.json's warnings say so, naming the class
    none_pass: str = ""


def _base(rng, n):
    return rng.integers(0, 2, n), rng.integers(0, 3, n)


def singleton_s(rng, n):
    s, r = _base(rng, n)
    s[7] = 5  # one row of class 5
    return {"s": s, "r": r}


def singleton_r(rng, n):
    s, r = _base(rng, n)
    r[11] = 9
    return {"s": s, "r": r}


def singleton_joint(rng, n):
    s, r = rng.integers(0, 2, n), rng.integers(0, 2, n)
    r[r == 1] = np.where(s[r == 1] == 1, 1, 0)  # r = 1 only with s = 1 ...
    r[3], s[3] = 1, 0  # ... except one row: the S x R cell (0, 1) has a single row
    return {"s": s, "r": r}


def singleton_w(rng, n):
    s, r = _base(rng, n)
    w = rng.integers(0, 3, n)
    w[13] = 8  # one row of class 8 in the watch attribute
    return {"s": s, "r": r, "w": w}


def majority_999(rng, n):
    s = np.zeros(n, dtype=np.int64)
    s[n // 2] = 1  # 1 of 1000 rows
    return {"s": s, "r": rng.integers(0, 3, n)}


def only_in_val(rng, n):
    s, r = _base(rng, n)
    return {"s": s, "r": r}


def val_with_new_class(rng, n):
    s, r = _base(rng, n)
    s[2] = 7  # a class the training rows never had
    return {"s": s, "r": r}


def strings(rng, n):
    s = np.array(["asian", "black", "white"], dtype=object)[rng.integers(0, 3, n)]
    s[5], s[9] = "pacific islander", "native"  # two singleton classes
    return {"s": s, "r": np.array(["no", "yes"], dtype=object)[rng.integers(0, 2, n)]}


def integers(rng, n):
    s = rng.integers(10, 16, n)
    s[:1], s[1:5] = 99, 98  # 1 and 4 members, as the 1,500-row table
    return {"s": s, "r": rng.integers(0, 7, n)}


def booleans(rng, n):
    s = np.zeros(n, dtype=bool)
    s[4] = True  # one True row
    return {"s": s, "r": rng.integers(0, 2, n).astype(bool)}


def nulls(rng, n):
    s = [int(v) for v in rng.integers(0, 2, n)]
    s[6] = None
    return {"s": pa.array(s, pa.int64()), "r": rng.integers(0, 2, n)}


SHAPES = [
    Shape("singleton-in-S", singleton_s, "s", "r", rare={"s": {"5"}}, joint_rare=("s=5, r=",),
          none_pass="class 5 has only 1 row"),
    Shape("singleton-in-R", singleton_r, "s", "r", rare={"r": {"9"}}),
    Shape("singleton-joint-SxR", singleton_joint, "s", "r", joint_rare=("s=0, r=1",)),
    Shape("majority-99.9", majority_999, "s", "r", rare={"s": {"1"}}, rows=1000,
          none_pass="class 1 has only 1 row"),
    Shape("class-only-in-validation", only_in_val, "s", "r", val=val_with_new_class,
          train_refusal=E.LabelError, rare={"s": {"7"}}, none_pass="class 7 has only 1 row"),
    Shape("string-labels", strings, "s", "r", rare={"s": {"pacific islander", "native"}},
          none_pass="has only 1 row"),
    Shape("integer-labels", integers, "s", "r", rare={"s": {"99", "98"}},
          none_pass="class 99 has only 1 row"),
    Shape("boolean-labels", booleans, "s", "r", rare={"s": {"True"}},
          none_pass="class True has only 1 row"),
    Shape("null-labels", nulls, "s", "r", refusal=E.InvalidValueError),
    Shape("singleton-in-watch", singleton_w, "s", "r", watch="w", rare={"w": {"8"}}),
]  # fmt: skip


def _write(path: Path, ids, x, labels: dict) -> str:
    cols = {"id": pa.array(ids), "emb": embedding_array(x.astype(np.float32))}
    cols.update({k: v if isinstance(v, pa.Array) else pa.array(list(v) if v.dtype == object
                                                                 else v)
                 for k, v in labels.items()})  # fmt: skip
    pq.write_table(pa.table(cols), str(path))
    return str(path)


def _data(shape: Shape, seed: int, labels_fn=None):
    rng = np.random.default_rng(seed)
    labels = (labels_fn or shape.labels)(rng, shape.rows)
    x = rng.normal(size=(shape.rows, DIM))
    s = labels[shape.suppress]
    if not isinstance(s, pa.Array):  # the suppressed attribute is readable from x
        x[:, 0] += np.unique(np.asarray(s).astype(str), return_inverse=True)[1].reshape(-1)
    return x, labels


def _verdict(fc, argv: list[str]) -> tuple[int | None, Exception | None]:
    """(exit code, None) or (None, the MassError): any other exception fails the test."""
    try:
        return fc.mass_command(argv), None
    except E.MassError as e:
        return None, e


def _check_refusal(err, want, shape):
    assert err is not None and type(err) is want, f"{shape.name}: {err!r}"
    assert f"'{shape.suppress}'" in str(err), str(err)  # names the attribute


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
@pytest.mark.slow
def test_train_reaches_a_verdict_and_lists_rare_classes(shape, tmp_path, fc):
    x, labels = _data(shape, 0)
    data = _write(tmp_path / "train.parquet", np.arange(shape.rows), x, labels)
    out = tmp_path / "run"
    argv = ["train", "--data", data, "--suppress", shape.suppress, "--out", str(out),
            "--budget-minutes", "0.02", "--no-progress"]  # fmt: skip
    if shape.preserve:
        argv += ["--preserve", shape.preserve]
    if shape.watch:
        argv += ["--watch", shape.watch]
    if shape.val:
        vx, vl = _data(shape, 1, shape.val)
        argv += ["--val", _write(tmp_path / "val.parquet", np.arange(shape.rows), vx, vl)]
    rc, err = _verdict(fc, argv)
    want = shape.refusal or shape.train_refusal
    if want is not None:
        _check_refusal(err, want, shape)
        return
    # a verdict: a configuration (rc 0) or the measured frontier (CalibrationError)
    assert rc == 0 or isinstance(err, E.CalibrationError), f"{shape.name}: {rc} {err!r}"
    rare = json.loads((out / "calibration.json").read_text())["validation"]["rare_classes"]
    assert rare["rule"] and rare["folds"] >= 2
    for attr, classes in shape.rare.items():
        assert classes <= set(rare["classes"][attr]), (shape.name, rare)
    for cell in shape.joint_rare:
        assert any(k.startswith(cell) for k in rare["joint"]), (shape.name, rare)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
@pytest.mark.slow
def test_audit_reaches_a_verdict_and_lists_rare_classes(shape, tmp_path, fc):
    x, labels = _data(shape, 0, shape.val)  # the audited rows (the validation shape, if any)
    ids = np.arange(shape.rows)
    xp = x + np.random.default_rng(2).normal(scale=0.5, size=x.shape)  # the "release"
    rel = _write(tmp_path / "rel.parquet", ids, xp, {})
    lab = _write(tmp_path / "labels.parquet", ids, x, labels)
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(AUDIT_PARAMS))  # JSON is YAML
    out = tmp_path / "report"
    argv = ["audit", "--release", rel, "--labels", lab, "--suppress", shape.suppress,
            "--report", str(out), "--params", str(params), "--no-chart"]  # fmt: skip
    if shape.preserve:
        argv += ["--preserve", shape.preserve]
    if shape.watch:
        argv += ["--watch", shape.watch]
    rc, err = _verdict(fc, argv)
    if shape.refusal is not None:
        _check_refusal(err, shape.refusal, shape)
        assert not (out / "audit.json").exists()
        return
    assert err is None and rc in (0, 1), f"{shape.name}: {rc} {err!r}"
    audit = json.loads((out / "audit.json").read_text())
    assert audit["rare_classes"]["rule"]
    hopeless = [w for w in audit["warnings"] if "no release of these" in w]
    assert bool(hopeless) == bool(shape.none_pass), (shape.name, audit["warnings"])
    if shape.none_pass:  # the attribute, the rows, the class and its count
        assert hopeless[0].startswith(f"{shape.suppress}: no release of these {shape.rows} "), (
            hopeless
        )
        assert shape.none_pass in hopeless[0] and rc == 1, (hopeless, rc)
    for attr, classes in shape.rare.items():
        row = (audit["unnamed"]["watch"] if attr == shape.watch else audit["attributes"])[attr]
        listed = row["rare_classes"]
        assert classes <= set(listed), (shape.name, listed)
        assert classes <= set(audit["rare_classes"]["attributes"][attr])
        html = (out / "report.html").read_text()  # the human report says it too
        assert "rare classes" in html and all(f"{c}: " in html for c in classes)
