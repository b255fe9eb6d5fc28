"""The one embedding decoder (mass.embeddings) under its three policies, and the Triton
contract's single home for tensor names."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mass.embeddings import KEEP, PER_ROW, STRICT, decode, embedding_array, fixed_view
from mass.errors import InvalidValueError, SchemaError

ROOT = Path(__file__).resolve().parents[2]


def _lists(rows):
    return pa.array(rows, type=pa.list_(pa.float64()))


@pytest.mark.parametrize(
    "rows, match",
    [
        ([[1.0, 2.0], None], "row 1 is null"),
        ([[1.0, 2.0], [1.0]], "is ragged: row 1 has 1 values, row 0 has 2"),
        ([[1.0, 2.0], [1.0, np.inf]], "row 1 has NaN or Inf"),
        ([[1.0, None]], "row 0 has a null value"),
    ],
)
def test_strict_refuses_naming_source_column_and_row(rows, match):
    with pytest.raises(InvalidValueError, match=re.escape(f"f.parquet: column 'emb' {match}")):
        decode(_lists(rows), column="emb", source="f.parquet", policy=STRICT)


def test_strict_refuses_another_models_dimension_and_non_numbers():
    with pytest.raises(SchemaError, match="dimension 2, the model expects 3"):
        decode(embedding_array(np.ones((2, 2))), column="emb", source="s", dim=3)
    with pytest.raises(SchemaError, match="holds string"):
        decode(pa.array([["a"]]), column="emb", source="s")
    with pytest.raises(SchemaError, match="expected a list of floats"):
        decode(pa.array([1.0]), column="emb", source="s")


def test_keep_turns_null_rows_into_nan_and_keeps_what_was_released():
    x = decode(_lists([None, [1.0, np.nan], [3.0, 4.0]]), column="emb", policy=KEEP).x
    assert x.dtype == np.float32 and x.flags.writeable and x.shape == (3, 2)
    assert np.isnan(x[0]).all() and np.isnan(x[1, 1]) and x[2].tolist() == [3.0, 4.0]
    with pytest.raises(InvalidValueError, match="ragged: row 2 has 1 values, row 1 has 2"):
        decode(_lists([None, [1.0, 2.0], [1.0]]), column="emb", policy=KEEP)


def test_per_row_marks_wrong_lengths_and_nulls_without_failing():
    got = decode(_lists([[1.0, 2.0], [1.0], None, [5.0, 6.0]]), column="emb", dim=2,
                 policy=PER_ROW)  # fmt: skip
    assert got.right_dim.tolist() == [True, False, False, True]
    assert got.x[3].tolist() == [5.0, 6.0] and np.isnan(got.x[1]).all()
    fixed = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0]), 2)
    got = decode(fixed, column="emb", dim=2, policy=PER_ROW)
    assert got.right_dim.all() and np.isnan(got.x[0, 1]) and got.x[1].tolist() == [3.0, 4.0]


def test_fixed_view_respects_slices_and_copies_nothing():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    arr = embedding_array(x).slice(1, 2)
    view = fixed_view(arr)
    assert view.tolist() == x[1:3].tolist()
    assert not view.flags.owndata  # a view over the Arrow buffer
    assert fixed_view(arr, np.uint8).dtype == np.uint8


def test_tensor_names_are_written_only_in_the_contract():
    """Code imports the tensor names from mass.serving.contract; no other module spells them
    as string literals (docstrings and messages may mention them)."""
    literal = re.compile(r"""["'](EMBEDDING|ROW_SEED|PRIVATIZED|IMAGE|TEXT)["']""")
    found = []
    for folder in ("mass", "transforms", "beam_pipelines", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "mass/serving/contract.py":
                continue
            found += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                      if literal.search(line)]  # fmt: skip
    assert not found, found
