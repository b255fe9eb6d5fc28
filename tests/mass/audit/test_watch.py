"""`mass audit --watch`: a watch attribute independent of S is kept by a release that keeps
structure (plain LEACE) and lost by the last resort (leace_project); audit.json, the stdout
table and report.html show both, and ``audit.watch_min_kept`` gates on it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.audit.report import format_table, write_all
from mass.audit.suite import REQUIRED_METADATA
from mass.demo.summary import summarize
from mass.embeddings import embedding_array
from mass.errors import ConfigError
from mass.methods import get_method
from mass.methods._common import toy_dataset
from mass.metrics.unnamed import last_resort_release

# these releases carry no mass.modifier metadata: no key view to judge, which the built-in
# policy refuses (tests/mass/audit/test_key_compromised.py); the tests here judge the watch
FAST = {"families": ["logreg", "knn"], "folds": 3, "gate_key_compromised": False}


@pytest.fixture(scope="module")
def data():
    ds = toy_dataset(900, dim=16, classes={"s": 2, "r": 3, "w": 3}, seed=5)
    res = get_method("leace").fit(ds, suppress=["s"], preserve=["r"], params={}, progress=False)
    with torch.no_grad():
        leace = res.modifier(torch.as_tensor(ds.x)).numpy()
    last = last_resort_release(ds.x, {"s": ds.labels["s"]}, {"r": ds.labels["r"]})
    last = last / np.maximum(np.linalg.norm(last, axis=1, keepdims=True), 1e-12)
    return ds, {"leace": leace.astype(np.float32), "last": last.astype(np.float32)}


def _write(tmp_path, ds, x, method):
    tmp_path.mkdir(parents=True, exist_ok=True)
    ids = np.asarray(ds.ids)
    labels = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"id": ids, "emb": embedding_array(ds.x),
                             **{a: v for a, v in ds.labels.items()}}), labels)  # fmt: skip
    meta = {k: "x" for k in REQUIRED_METADATA}
    meta.update({"mass.suppress": '["s"]', "mass.preserve": '["r"]',
                 "mass.forced_columns": "[]", "mass.method": method})  # fmt: skip
    table = pa.table({"id": ids, "emb": embedding_array(x)}).replace_schema_metadata(
        {k.encode(): v.encode() for k, v in meta.items()})  # fmt: skip
    (tmp_path / "release").mkdir()
    pq.write_table(table, tmp_path / "release" / "part-00000-of-00001.parquet")
    return str(tmp_path / "release"), str(labels)


def _audit(tmp_path, ds, x, method, policy=FAST, watch=("w",)):
    release, labels = _write(tmp_path, ds, x, method)
    req = AuditRequest(release=release, labels=labels, suppress=("s",), preserve=("r",),
                       watch=watch, policy=policy_from_dict(policy))  # fmt: skip
    return run_audit(req)


def test_watch_kept_by_leace_lost_by_the_last_resort_and_reported(tmp_path, data):
    ds, rel = data
    kept = _audit(tmp_path / "a", ds, rel["leace"], "leace")
    lost = _audit(tmp_path / "b", ds, rel["last"], "leace_project")
    wk, wl = kept.unnamed["watch"]["w"], lost.unnamed["watch"]["w"]
    assert wk["kept"] > 0.9 and wl["kept"] < 0.2, (wk["kept"], wl["kept"])
    assert wk["dependence"]["s"]["cramers_v"] < 0.1
    sk, sl = kept.unnamed["structure"], lost.unnamed["structure"]
    assert sk["knn_overlap"] > 0.6 > 0.3 > sl["knn_overlap"]
    ref = kept.unnamed["structure_reference"]["last_resort"]
    assert ref["knn_overlap"] < 0.3  # the reference a reader places the release against
    for res, sub in ((kept, "a"), (lost, "b")):
        out = write_all(res, str(tmp_path / sub / "report"), chart=False)
        assert out["unnamed"]["watch"]["w"]["kept"] == pytest.approx(
            res.unnamed["watch"]["w"]["kept"], abs=1e-6)  # fmt: skip
        html = (tmp_path / sub / "report" / "report.html").read_text()
        assert "Utility nobody named" in html and f"{res.unnamed['watch']['w']['kept']:.2f}" in html
        assert "over 3 fold orders" in html and "over 3 fold orders" in "\n".join(
            summarize(out, "release"))  # fmt: skip
        text = "\n".join(summarize(out, "release"))  # the CLI/demo summary
        assert f"Unnamed:      w  kept {res.unnamed['watch']['w']['kept']:.3f}" in text
        assert ("data minimisation" in text) == (sub == "b") == ("data minimisation" in html)
    assert "watch w: kept" in format_table(kept) and "structure kept within S" in format_table(lost)
    # read over audit.watch_repeats fold orders (default 3): the mean and one order's range
    lo, hi = wk["kept_range"]
    assert wk["repeats"] == 3 and lo <= hi and f"({lo:.2f}-{hi:.2f} over 3 fold orders)" in (
        format_table(kept))  # fmt: skip
    one = _audit(tmp_path / "c", ds, rel["leace"], "leace", {**FAST, "watch_repeats": 1})
    w1 = one.unnamed["watch"]["w"]
    assert w1["repeats"] == 1 and "fold orders" not in format_table(one)
    assert w1["release_by_family"] != wk["release_by_family"]  # the mean of 3 is not order 1


def test_watch_min_kept_gates_and_overlap_is_refused(tmp_path, data):
    ds, rel = data
    pol = {**FAST, "watch_min_kept": 0.8}
    kept = _audit(tmp_path / "a", ds, rel["leace"], "leace", pol).outcome
    lost = _audit(tmp_path / "b", ds, rel["last"], "leace_project", pol).outcome
    assert [e.success for e in kept.expectations if e.suite == "watch_utility"] == [True]
    assert [e.success for e in lost.expectations if e.suite == "watch_utility"] == [False]
    assert not lost.success
    with pytest.raises(ConfigError, match="--watch"):
        _audit(tmp_path / "c", ds, rel["leace"], "leace", watch=("r",))
    # the policy's audit.watch is shared by every dataset: a column these labels lack is
    # skipped (a --watch naming it is not: the scan refuses it)
    shared = _audit(tmp_path / "d", ds, rel["leace"], "leace", {**pol, "watch": ["zz", "w"]}, ())
    assert list(shared.unnamed["watch"]) == ["w"]


def test_a_cell_release_states_what_its_cells_can_carry(tmp_path, data):
    """A cell release's audit carries unnamed.capacity (log2 of its distinct vectors beside
    the watch attributes' entropies) into audit.json, the stdout table, report.html and
    _RELEASE.md's lines; a continuous release has none."""
    from sklearn.cluster import KMeans

    from mass.report.unnamed import unnamed_markdown

    ds, rel = data
    km = KMeans(n_clusters=16, n_init=2, random_state=0).fit(rel["leace"])
    cells = km.cluster_centers_[km.labels_].astype(np.float32)
    res = _audit(tmp_path / "c", ds, cells, "ot_repair")
    cap = res.unnamed["capacity"]
    assert cap["cells"] == len(np.unique(km.labels_)) == 16 and cap["rows"] == len(cells)
    assert cap["bits_max"] == pytest.approx(4.0) and 0 < cap["bits_rows"] <= 4.0
    counts = np.bincount(ds.labels["w"]) / len(ds.labels["w"])
    h_w = float(-(counts * np.log2(counts)).sum())
    assert cap["watch_bits"]["w"] == pytest.approx(h_w, abs=1e-6) and cap["watch_fits"]
    assert "capacity: 16 cells carry at most 4.00 bits" in format_table(res).lower()
    out = write_all(res, str(tmp_path / "c" / "report"), chart=False)
    assert out["unnamed"]["capacity"]["cells"] == 16
    html = (tmp_path / "c" / "report" / "report.html").read_text()
    assert "Capacity: 16 cells carry at most 4.00 bits" in html
    assert any(line.startswith("- Capacity: 16 cells") for line in unnamed_markdown(out))
    assert "Capacity:     16 cells carry at most 4.00 bits" in "\n".join(summarize(out, "r"))
    assert _audit(tmp_path / "d", ds, rel["leace"], "leace").unnamed["capacity"] is None
