"""The Triton backend: RecordBatch -> Triton (gRPC, binary tensors or shared memory) ->
RecordBatch with ``output_col`` set, shaped like Beam's remote handlers
(``RemoteModelHandler``: ``create_client`` once per worker, ``request`` per batch)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import RemoteModelHandler

from mass.serving.contract import PRIVATIZED
from mass.serving.tensors import ModifierInputs, Tensors
from mass.serving.triton_client import RequestPolicy, TritonClient
from transforms.inference.base import NAMESPACE, ArrowBatchInference


class TritonModelHandler(ArrowBatchInference, RemoteModelHandler):
    """RecordBatch -> Triton -> RecordBatch with ``output_col`` set.

    One :class:`TritonClient` per worker (``create_client``); requests are split to the
    model's ``max_batch_size``; UNAVAILABLE / DEADLINE_EXCEEDED are retried ``max_retries``
    times with exponential backoff starting at ``backoff_s`` (counted in the ``retries``
    metric); each request times out after ``timeout_s``. Any other error, or a bad response,
    fails the batch. A batch goes out as requests of at most ``request_rows`` rows,
    ``in_flight`` of them at a time. ``shared_memory``: "auto" (on for a server on this host
    when it grants the access header), True (an error if refused) or False.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str = "",
        inputs: Callable[[pa.RecordBatch], Tensors] | None = None,
        output: str = PRIVATIZED,
        output_col: str = "emb",
        output_dim: int | None = None,
        keep_input_as: str | None = None,
        input_col: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        request_rows: int | None = 2048,
        in_flight: int = 2,
        shared_memory: str | bool = "auto",
        headers: dict[str, str] | None = None,
    ) -> None:
        # Retries happen in TritonClient.infer (configurable backoff, counted), not in Beam's.
        RemoteModelHandler.__init__(self, namespace=NAMESPACE, num_retries=0)
        forced = shared_memory is True  # --triton-shm on: an error if the server refuses
        if shared_memory == "auto":  # only a server on this host can map our regions
            host = url.rsplit(":", 1)[0].strip("[]")
            shared_memory = host in ("127.0.0.1", "localhost", "::1")
        self._shm: bool | str = True if forced else ("auto" if shared_memory else False)
        if headers is None:  # the job that started the server knows its token (mass.serving)
            from mass.serving.access import client_headers

            headers = client_headers(url) if self._shm else {}
        self._headers = dict(headers)
        self._url, self._version, self._output = url, str(version or ""), output
        self._policy = RequestPolicy(timeout_s=timeout_s, max_retries=max_retries,
                                     backoff_s=backoff_s, request_rows=request_rows,
                                     in_flight=in_flight)  # fmt: skip
        self._retries = Metrics.counter(NAMESPACE, "retries")
        self._init_arrow(
            model=model,
            inputs=inputs or ModifierInputs(),
            output_col=output_col,
            output_dim=output_dim,
            keep_input_as=keep_input_as,
            input_col=input_col,
        )

    def create_client(self) -> TritonClient:
        return TritonClient(
            self._url,
            self.model_name,
            self._version,
            shared_memory=self._shm,
            headers=self._headers,
            policy=self._policy,
            on_retry=self._retries.inc,
        )

    def request(self, batch, model: TritonClient, inference_args=None):
        return self._each(batch, lambda t: model.infer(t, self._output, self._output_dim))
