from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.ml.inference.base import RunInference
from apache_beam.testing.util import assert_that, equal_to

from mass.embeddings import embedding_array
from mass.errors import ResponseShapeError, ServingError
from mass.serving import free_port
from mass.serving.contract import EMBEDDING, PRIVATIZED, ROW_SEED
from mass.serving.shm import SHM_PREFIX
from mass.serving.tensors import ModifierInputs, check_response
from mass.serving.triton_client import RequestPolicy, TritonClient
from mass.testing.stand_ins import NumpyModifier, WrongWidth
from transforms.inference.function import FunctionModelHandler
from transforms.inference.triton import TritonModelHandler


def _batch(n=5, d=4, start=0):
    x = np.arange(n * d, dtype=np.float32).reshape(n, d) + 1
    return pa.RecordBatch.from_pydict(
        {"id": list(range(start, start + n)), "emb": embedding_array(x), "digit": [1] * n}
    )


@pytest.mark.parametrize(
    "out, why",
    [
        (np.zeros((5, 3), np.float32), "expected float32 \\[5, 4\\]"),
        (np.zeros((4, 4), np.float32), "for 5 rows"),
        (np.zeros((5, 4), np.float64), "float64"),
        (np.full((5, 4), np.nan, np.float32), "NaN/Inf at batch row 0"),
    ],
)
def test_bad_responses_are_refused(out, why):
    with pytest.raises(ResponseShapeError, match=why):
        check_response(out, rows=5, dim=4, model="m")


def test_modifier_inputs_are_float32_matrix_and_int64_seed_column():
    t = ModifierInputs()(_batch().slice(1, 3))  # a slice: offsets must be respected
    assert t["EMBEDDING"].dtype == np.float32 and t["EMBEDDING"].shape == (3, 4)
    assert t["EMBEDDING"][0, 0] == 5.0
    assert t["ROW_SEED"].dtype == np.int64 and t["ROW_SEED"].shape == (3, 1)


def test_function_handler_in_run_inference_replaces_emb_and_keeps_rows(beam_pipeline):
    handler = FunctionModelHandler(NumpyModifier(), output_dim=4, keep_input_as="orig")

    def check(b):
        out, orig = b.column("emb").to_pylist(), b.column("orig").to_pylist()
        return (
            b.column("id").to_pylist(),
            b.column("digit").to_pylist() == [1] * b.num_rows,
            all(o != i for o, i in zip(out, orig, strict=True)),
            b.schema.field("emb").type,
        )

    with beam_pipeline() as p:
        res = p | beam.Create([_batch(), _batch(3, start=10)]) | RunInference(handler)
        assert_that(
            res | beam.Map(check),
            equal_to(
                [
                    ([0, 1, 2, 3, 4], True, True, pa.list_(pa.float32(), 4)),
                    ([10, 11, 12], True, True, pa.list_(pa.float32(), 4)),
                ]
            ),
        )


def test_function_handler_refuses_a_wrong_width_batch():
    handler = FunctionModelHandler(WrongWidth(), output_dim=4)
    with pytest.raises(ResponseShapeError):
        handler.run_inference(_batch(), handler.load_model())


def test_unreachable_server_is_a_serving_error_at_client_creation():
    with pytest.raises(ServingError, match="cannot reach model 'm'"):
        TritonModelHandler(f"127.0.0.1:{free_port()}", "m").create_client()


def _offline_client(url: str, *, shm: bool, policy: RequestPolicy, on_retry=None):
    """A TritonClient for a server that is not there (its constructor would refuse it)."""
    import threading

    import tritonclient.grpc as grpcclient

    conn = TritonClient.__new__(TritonClient)
    conn.url, conn.model, conn.version, conn.max_batch = url, "m", "", None
    conn.policy, conn.on_retry, conn.headers = policy, on_retry, {}
    conn.client = grpcclient.InferenceServerClient(url)
    conn.inputs = {EMBEDDING: "FP32", ROW_SEED: "INT64"}
    conn.output_dims = {PRIVATIZED: [4]}
    conn.shm, conn._local, conn._slots, conn._lock = shm, threading.local(), [], threading.Lock()
    conn._pool = None
    return conn


@pytest.mark.parametrize("shm", [False, True])
def test_unavailable_is_retried_with_backoff_then_fails(shm):
    url = f"127.0.0.1:{free_port()}"
    handler = TritonModelHandler(url, "m", max_retries=2, backoff_s=0.01, timeout_s=2,
                                 shared_memory=shm)  # fmt: skip
    retried = []
    conn = _offline_client(url, shm=shm, policy=handler._policy,
                           on_retry=lambda: retried.append(1))  # fmt: skip
    mine = f"{SHM_PREFIX}-{os.getpid()}-"  # only this process's regions: another job's may come
    before = {f for f in os.listdir("/dev/shm") if f.startswith(mine)}
    with pytest.raises(ServingError, match="UNAVAILABLE.*after 2 retries"):
        handler.request(_batch(), conn)
    assert len(retried) == 2  # the one retry loop: the client's, counted through on_retry
    # no region of ours left behind by failed attempts
    assert {f for f in os.listdir("/dev/shm") if f.startswith(mine)} <= before


def test_the_client_alone_retries_as_the_handler_does():
    """The benchmark drives TritonClient directly: the same loop, the same error."""
    url = f"127.0.0.1:{free_port()}"
    conn = _offline_client(url, shm=False, policy=RequestPolicy(max_retries=1, backoff_s=0.01,
                                                                 timeout_s=2))  # fmt: skip
    t = ModifierInputs()(_batch())
    with pytest.raises(ServingError, match="UNAVAILABLE.*after 1 retries"):
        conn.infer(t, PRIVATIZED)


def test_extractor_inputs_are_uint8_images_and_byte_strings():
    from mass.serving.tensors import ImageInputs, TextInputs

    images = np.arange(2 * 2352, dtype=np.uint64).astype(np.uint8).reshape(2, 2352)
    batch = pa.RecordBatch.from_pydict(
        {
            "image": pa.FixedSizeListArray.from_arrays(pa.array(images.ravel()), 2352),
            "text": ["a cat", "ünïcode"],
        }
    )
    img = ImageInputs()(batch)["IMAGE"]
    assert img.dtype == np.uint8 and np.array_equal(img, images)
    txt = TextInputs()(batch)["TEXT"]
    assert txt.shape == (2, 1) and txt[1, 0] == "ünïcode".encode()
