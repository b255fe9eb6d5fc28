"""Property test over input layout, bad rows, batch size and shard count.

Extends tests/beam_pipelines/test_anonymize.py's property (one clean file): here the input
is split over several files with random row groups and carries random bad rows, so the
accounting includes the quarantine: released + quarantined == input, disjoint, ids equal,
every released row modified. The model is the in-process stand-in (no server needed).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.testing.stand_ins import NumpyModifier
from transforms.inference.function import FunctionModelHandler

DIM = 8
INFO = {"name": "np", "version": 1, "sha256": "0" * 64, "method": "test", "suppress": ["digit"],
        "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip


@st.composite
def layouts(draw):
    rows = draw(st.integers(1, 300))
    files = draw(st.integers(1, min(4, rows)))
    cuts = sorted(draw(st.sets(st.integers(1, rows - 1), min_size=files - 1,
                               max_size=files - 1))) if files > 1 else []  # fmt: skip
    bad = draw(st.sets(st.integers(0, rows - 1), max_size=min(10, rows - 1)))
    kinds = [draw(st.sampled_from(["nan", "inf", "zero"])) for _ in bad]
    return {
        "rows": rows,
        "cuts": [0, *cuts, rows],
        "row_group": draw(st.integers(1, 128)),
        "bad": dict(zip(sorted(bad), kinds, strict=True)),
        "batch_rows": draw(st.integers(1, 400)),
        "shards": draw(st.integers(1, 6)),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(case=layouts())
def test_every_row_is_released_once_or_quarantined_and_released_rows_are_modified(
    tmp_path_factory, case
):
    base = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(case["seed"])
    n = case["rows"]
    ids = rng.permutation(np.arange(n, dtype=np.int64) * 7 + 3)  # unordered, sparse ids
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    for row, kind in case["bad"].items():
        x[row] = 0.0 if kind == "zero" else x[row]
        x[row, 0] = {"nan": np.nan, "inf": np.inf, "zero": 0.0}[kind]
    table = pa.table({"id": ids, "emb": embedding_array(x), "digit": rng.integers(0, 3, n)})
    (base / "in").mkdir()
    for i, (a, b) in enumerate(zip(case["cuts"], case["cuts"][1:], strict=False)):
        pq.write_table(table.slice(a, b - a), str(base / "in" / f"f{i}.parquet"),
                       row_group_size=case["row_group"])  # fmt: skip
    out = base / "out"
    handler = FunctionModelHandler(NumpyModifier(), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    summary = anonymize.run(
        ["--input", str(base / "in"), "--output", str(out), "--model", "np",
         "--batch-rows", str(case["batch_rows"]), "--shards", str(case["shards"]),
         "--max-quarantined", str(len(case["bad"])), "--no-audit"],
        model_handler=handler, model_info=INFO,
    )  # fmt: skip
    released = pq.read_table(out)
    quarantined = pq.read_table(f"{out}_quarantine")
    assert summary["rows_in"] == n
    assert summary["rows_out"] == released.num_rows == n - len(case["bad"])
    assert summary["quarantined"] == quarantined.num_rows == len(case["bad"])
    assert len(list(out.glob("part-*.parquet"))) == case["shards"]
    rel_ids = released.column("id").to_numpy()
    q_ids = quarantined.column("id").to_numpy()
    assert len(np.unique(rel_ids)) == len(rel_ids)  # no row twice
    assert np.array_equal(np.sort(np.concatenate([rel_ids, q_ids])), np.sort(ids))
    assert set(q_ids.tolist()) == {int(ids[r]) for r in case["bad"]}
    by_id = {int(i): k for k, i in enumerate(ids)}
    src = x[[by_id[int(i)] for i in rel_ids]]
    y = np.stack(released.column("emb").to_numpy(zero_copy_only=False)) if len(rel_ids) else src
    assert np.isfinite(y).all() and np.all(np.any(y != src, axis=1))  # no unmodified row
