"""The job writer's per-row bypass flag on the cases the release gate depends on: an output
parallel to its input at any scale, and an exact copy whose cosine cannot be computed (a zero
row). Kills the mutants writer-cosine-bypass-missed and writer-exact-copy-missed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mass.batches.spill import BYPASS_COSINE, UNMODIFIED, row_flags
from mass.embeddings import embedding_array


def _flags(src, out) -> list[int]:
    batch = pa.RecordBatch.from_pydict(
        {
            "emb": embedding_array(np.asarray(out, np.float32)),
            "__src": embedding_array(np.asarray(src, np.float32)),
        }
    )
    return row_flags(batch, "emb", "__src").tolist()  # fmt: skip


def test_outputs_parallel_to_their_input_are_flagged_at_any_scale():
    src = np.array([[0.6, 0.8], [0.6, 0.8], [0.6, 0.8], [0.6, 0.8]])
    out = np.array([[1.8, 2.4], [0.6 * 1.0000001, 0.8], [0.06, 0.08], [0.8, 0.6]])
    assert _flags(src, out) == [UNMODIFIED, UNMODIFIED, UNMODIFIED, 0]
    assert 0.96 < BYPASS_COSINE  # [0.8, 0.6] vs [0.6, 0.8]: cosine 0.96, a modified row


@pytest.mark.slow
def test_an_exact_copy_is_flagged_even_where_no_cosine_exists():
    zero = np.zeros((1, 2))
    assert _flags(zero, zero) == [UNMODIFIED]
