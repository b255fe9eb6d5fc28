"""Beam model handlers that map a whole ``pa.RecordBatch`` to a ``pa.RecordBatch``.

Same contract as ``apache_beam.ml.inference``: a handler loads a "model" once per worker
(``load_model``; for Triton, one gRPC client) and ``run_inference`` applies it; use it with
``RunInference(handler)``. Batching is skipped because every element already is a batch of
``--batch-rows`` rows; the Triton handler splits it further to the model's
``max_batch_size``. What runs is swappable: :class:`TritonModelHandler` calls a server,
:class:`FunctionModelHandler` calls a Python function with the same named input tensors
(tests, in-process runs). Both validate the response (shape ``[n, d]``, float32, finite) and
raise :class:`mass.errors.ResponseShapeError` instead of writing a batch they could not modify.
"""

from __future__ import annotations

import atexit
import copy
import glob
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, RemoteModelHandler

from mass.errors import ResponseShapeError, ServingError
from mass.io import embedding_array
from mass.noise import KeyedSeeds

log = logging.getLogger(__name__)
Tensors = dict[str, np.ndarray]
RETRYABLE = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
NAMESPACE = "mass"


def _matrix(batch: pa.RecordBatch, col: str, dtype) -> np.ndarray:
    """Fixed-size-list column -> ``[n, d]`` numpy view of the Arrow buffer (no copy)."""
    arr = batch.column(col)
    d = arr.type.list_size
    n = batch.num_rows
    return (
        arr.values.slice(arr.offset * d, n * d)
        .to_numpy(zero_copy_only=False)
        .astype(dtype, copy=False)
        .reshape(n, d)
    )


class ModifierInputs:
    """Modifier tensors: ``EMBEDDING`` float32 ``[n, d]`` and ``ROW_SEED`` int64 ``[n, 1]``.

    ``ROW_SEED`` is ``seeds(ids)``, the owner-keyed PRF of each row id
    (:class:`mass.noise.KeyedSeeds`: ``keyed_row_seeds(ids, key, context)``), so the noise a
    stochastic modifier draws from it cannot be recomputed from the released ids. Without
    ``seeds`` every ROW_SEED is 0: only for deterministic modifiers, which ignore it (the
    anonymize job refuses a stochastic or unknown modifier without a key). Never the public
    :func:`mass.noise.row_seeds`, which anyone can recompute from the released ids.
    """

    def __init__(
        self, *, id_col: str = "id", emb_col: str = "emb", seeds: KeyedSeeds | None = None
    ) -> None:
        self.id_col, self.emb_col, self.seeds = id_col, emb_col, seeds

    def with_seeds(self, seeds: KeyedSeeds | None) -> ModifierInputs:
        return ModifierInputs(id_col=self.id_col, emb_col=self.emb_col, seeds=seeds)

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        if self.seeds is None:
            seeds = np.zeros((batch.num_rows, 1), dtype=np.int64)
        else:
            seeds = self.seeds(batch.column(self.id_col)).reshape(-1, 1)
        return {"EMBEDDING": _matrix(batch, self.emb_col, np.float32), "ROW_SEED": seeds}


class ImageInputs:
    """Extractor tensor ``IMAGE`` uint8 ``[n, 2352]`` from a fixed-size-list<uint8> column."""

    def __init__(self, *, raw_col: str = "image", name: str = "IMAGE") -> None:
        self.raw_col, self.name = raw_col, name

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        return {self.name: _matrix(batch, self.raw_col, np.uint8)}


class TextInputs:
    """Extractor tensor ``TEXT`` BYTES ``[n, 1]`` (strings must cross as objects for gRPC)."""

    def __init__(self, *, raw_col: str = "text", name: str = "TEXT") -> None:
        self.raw_col, self.name = raw_col, name

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        col = batch.column(self.raw_col).to_numpy(zero_copy_only=False)
        return {self.name: np.asarray([s.encode() for s in col], dtype=object).reshape(-1, 1)}


def check_response(out, *, rows: int, dim: int | None, model: str) -> np.ndarray:
    """Refuse a response that is not float32 ``[rows, dim]`` and finite."""
    if (
        not isinstance(out, np.ndarray)
        or out.dtype != np.float32
        or out.ndim != 2
        or out.shape[0] != rows
        or (dim is not None and out.shape[1] != dim)
    ):
        got = (getattr(out, "shape", None), getattr(out, "dtype", type(out).__name__))
        raise ResponseShapeError(
            f"model '{model}' returned {got} for {rows} rows; expected float32 [{rows}, "
            f"{dim if dim is not None else 'd'}]; check the model's config.pbtxt output dims"
        )
    if not np.isfinite(out).all():
        row = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise ResponseShapeError(
            f"model '{model}' returned NaN/Inf at batch row {row}; "
            "the batch is refused; check the exported model"
        )
    return out


class _ArrowBatchInference:
    """RecordBatch plumbing shared by both handlers (inputs, validation, output column)."""

    def _init_arrow(
        self,
        *,
        model: str,
        inputs: Callable[[pa.RecordBatch], Tensors],
        output: str,
        output_col: str,
        output_dim: int | None,
        keep_input_as: str | None,
        input_col: str | None,
    ) -> None:
        self.model_name = model
        self._inputs = inputs
        self._output = output
        self._output_col = output_col
        self._output_dim = output_dim
        self._keep_input_as = keep_input_as
        self._input_col = input_col or output_col
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._rows_out = Metrics.counter(NAMESPACE, "rows_out")
        self._batches = Metrics.counter(NAMESPACE, "batches")

    def with_row_seeds(self, seeds: KeyedSeeds | None):
        """A copy whose :class:`ModifierInputs` send ``ROW_SEED = seeds(ids)`` (the job's key);
        other input builders (extractors take no seed) are kept as they are."""
        if not isinstance(self._inputs, ModifierInputs):
            return self
        handler = copy.copy(self)
        handler._inputs = self._inputs.with_seeds(seeds)
        return handler

    def _apply(self, batch: pa.RecordBatch, infer: Callable[[Tensors], np.ndarray]):
        self._rows_in.inc(batch.num_rows)
        out = check_response(
            infer(self._inputs(batch)),
            rows=batch.num_rows,
            dim=self._output_dim,
            model=self.model_name,
        )
        result = batch
        if self._keep_input_as:
            result = result.append_column(self._keep_input_as, batch.column(self._input_col))
        col = embedding_array(out)
        if self._output_col in result.schema.names:
            idx = result.schema.get_field_index(self._output_col)
            result = result.set_column(idx, self._output_col, col)
        else:
            result = result.append_column(self._output_col, col)
        self._batches.inc()
        self._rows_out.inc(result.num_rows)
        return result

    def _each(self, batch, infer) -> list[pa.RecordBatch]:
        batches = [batch] if isinstance(batch, pa.RecordBatch) else list(batch)
        return [self._apply(b, infer) for b in batches]

    def should_skip_batching(self) -> bool:
        return True  # elements are already RecordBatches of --batch-rows rows

    def get_num_bytes(self, batch) -> int:
        batches = [batch] if isinstance(batch, pa.RecordBatch) else batch
        return int(sum(b.nbytes for b in batches))

    def get_metrics_namespace(self) -> str:
        return NAMESPACE


class FunctionModelHandler(_ArrowBatchInference, ModelHandler):
    """Run ``load()`` once per worker, then ``fn(tensors) -> float32[n, d]`` per batch.

    ``load`` is a picklable zero-argument callable returning the inference function (e.g.
    :class:`TorchModifierFunction`), so heavy models are built on the worker, not pickled.
    The anonymize job rebinds the default :class:`ModifierInputs` to its keyed seeds
    (:meth:`with_row_seeds`), exactly as for Triton.
    """

    def __init__(
        self,
        load: Callable[[], Callable[[Tensors], np.ndarray]],
        *,
        model: str = "function",
        inputs: Callable[[pa.RecordBatch], Tensors] | None = None,
        output_col: str = "emb",
        output_dim: int | None = None,
        keep_input_as: str | None = None,
        input_col: str | None = None,
    ) -> None:
        ModelHandler.__init__(self)
        self._load = load
        self._init_arrow(
            model=model,
            inputs=inputs or ModifierInputs(),
            output="",
            output_col=output_col,
            output_dim=output_dim,
            keep_input_as=keep_input_as,
            input_col=input_col,
        )

    def load_model(self):
        return self._load()

    def run_inference(self, batch, model, inference_args=None):
        return self._each(batch, model)


class TorchModifierFunction:
    """In-process modifier: ``load_modifier(path)`` applied to EMBEDDING with ROW_SEED."""

    def __init__(self, path: str, *, threads: int = 1) -> None:
        self.path, self.threads = path, threads

    def __call__(self):
        import torch

        from mass.modifiers import load_modifier

        torch.set_num_threads(self.threads)
        model = load_modifier(self.path)

        def infer(t: Tensors) -> np.ndarray:
            with torch.no_grad():
                seeds = torch.from_numpy(np.ascontiguousarray(t["ROW_SEED"][:, 0]))
                return model(torch.from_numpy(np.array(t["EMBEDDING"])), seeds=seeds).numpy()

        return infer


class _TritonConnection:
    headers: dict[str, str] = {}  # noqa: RUF012 (read-only default; __init__ sets its own)

    def __init__(
        self,
        url: str,
        model: str,
        version: str,
        *,
        shared_memory: bool | str = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.url, self.model, self.version = url, model, version
        # the server's shared-memory API is restricted (mass.serving): every call carries this
        self.headers = dict(headers or {})
        self._slots: list[_ShmSlot] = []
        self.client = grpcclient.InferenceServerClient(url=url)
        # Workers keep the client until exit; close and drop it before gRPC's module teardown
        # (its __del__ would otherwise close again against half-unloaded modules).
        atexit.register(self.close)
        try:
            ready = self.client.is_model_ready(model, version)
            cfg = self.client.get_model_config(model, version, as_json=True)["config"]
        except Exception as e:  # tritonclient raises its own exception type for gRPC errors
            raise ServingError(
                f"Triton at {url}: cannot reach model '{model}' ({e}); "
                "start the server (mass serve) or fix --triton-url"
            ) from e
        if not ready:
            raise ServingError(
                f"Triton at {url}: model '{model}' version '{version or 'latest'}'"
                " is not ready; check the server log and the repository"
            )
        self.max_batch = int(cfg.get("max_batch_size", 0)) or None
        self.inputs = {i["name"]: i["data_type"].removeprefix("TYPE_") for i in cfg["input"]}
        self.output_dims = {o["name"]: [int(d) for d in o.get("dims", [])] for o in cfg["output"]}
        self._pool = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self.shm = bool(shared_memory) and self._shm_allowed(forced=shared_memory is True)
        if self.shm:
            _clear_stale_regions(self.client, self.headers)

    def _shm_allowed(self, *, forced: bool) -> bool:
        """Whether the server lets us use its shared-memory API (needs its access header)."""
        try:
            self.client.get_system_shared_memory_status(headers=self.headers)
            return True
        except Exception as e:  # restricted without our header, or no shm support
            if forced:
                raise ServingError(
                    f"Triton at {self.url}: shared memory refused ({e}); the server restricts "
                    "it to the process that started it: set MASS_TRITON_ACCESS_FILE to the "
                    "access file `mass serve` printed, or use --triton-shm off"
                ) from e
            log.warning("Triton at %s: shared memory not available (%s); sending tensors over "
                        "gRPC instead", self.url, str(e).splitlines()[0])  # fmt: skip
            return False

    def slot(self, in_bytes: int, out_bytes: int) -> _ShmSlot:
        """This thread's pair of registered regions, grown (powers of two) to fit."""
        slot = getattr(self._local, "slot", None)
        if slot is None or slot.in_size < in_bytes or slot.out_size < out_bytes:
            if slot is not None:
                slot.close(self.client, self.headers)
            slot = _ShmSlot(self.client, _pow2(in_bytes), _pow2(out_bytes), self.headers)
            self._local.slot = slot
            with self._lock:
                self._slots = [s for s in self._slots if s.open] + [slot]
        return slot

    def reregister(self) -> None:
        """Register every region again (a restarted server has forgotten them)."""
        with self._lock:
            for s in self._slots:
                if s.open:
                    s.register(self.client, self.headers)

    def pool(self, workers: int):
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:  # gRPC channels are thread-safe: one client, several requests
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="triton-request")
        return self._pool

    def close(self) -> None:
        client, self.client = self.client, None
        for s in self._slots:
            s.close(client, self.headers)
        self._slots = []
        if client is not None:
            client.close()


SHM_PREFIX = "mass-shm"


def _pow2(n: int) -> int:
    return 1 << max(16, int(n - 1).bit_length())


class _ShmSlot:
    """Two system shared-memory regions (all inputs, the output) registered with the server.

    Regions are created new (never an existing one: ``create_only``), mode 0600 (Python's
    ``SharedMemory``), named ``mass-shm-<pid>-<16 random hex>-in|out``: unpredictable, while
    the pid lets a later client drop what a killed one left behind.
    """

    def __init__(self, client, in_size: int, out_size: int, headers=None) -> None:
        import tritonclient.utils.shared_memory as shm

        tag = f"{SHM_PREFIX}-{os.getpid()}-{secrets.token_hex(8)}"
        self.in_name, self.out_name = f"{tag}-in", f"{tag}-out"
        self.in_size, self.out_size = in_size, out_size
        self.in_h = shm.create_shared_memory_region(
            self.in_name, f"/{self.in_name}", in_size, create_only=True
        )
        try:
            self.out_h = shm.create_shared_memory_region(
                self.out_name, f"/{self.out_name}", out_size, create_only=True
            )
        except Exception:
            shm.destroy_shared_memory_region(self.in_h)
            raise
        self.open = True
        try:
            self.register(client, headers)
        except Exception:
            self.close(None)  # never leave an unregistered region behind
            raise

    def register(self, client, headers=None) -> None:
        for name, size in ((self.in_name, self.in_size), (self.out_name, self.out_size)):
            try:
                client.unregister_system_shared_memory(name, headers=headers)
            except Exception:  # not registered (new region, or a restarted server)
                pass
            client.register_system_shared_memory(name, f"/{name}", size, headers=headers)

    def close(self, client, headers=None) -> None:
        import tritonclient.utils.shared_memory as shm

        if not self.open:
            return
        self.open = False
        for name, h in ((self.in_name, self.in_h), (self.out_name, self.out_h)):
            if client is not None:
                try:
                    client.unregister_system_shared_memory(name, headers=headers)
                except Exception:  # the server may be gone; the region is ours to remove
                    pass
            shm.destroy_shared_memory_region(h)


def _clear_stale_regions(client, headers=None) -> None:
    """Unregister and unlink regions of dead processes (a killed job cannot clean up)."""
    from transforms.release import pid_alive

    dead = set()
    for path in glob.glob(f"/dev/shm/{SHM_PREFIX}-*"):
        pid = os.path.basename(path).split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            dead.add(os.path.basename(path))
    try:
        status = client.get_system_shared_memory_status(as_json=True, headers=headers)
        status = status.get("regions", {})
        dead |= {n for n in status if n.startswith(SHM_PREFIX)
                 and not pid_alive(int(n.split("-")[2]))}  # fmt: skip
    except Exception:
        pass
    for name in dead:
        try:
            client.unregister_system_shared_memory(name, headers=headers)
        except Exception:
            pass
        try:
            os.unlink(f"/dev/shm/{name}")
        except OSError:
            pass


class TritonModelHandler(_ArrowBatchInference, RemoteModelHandler):
    """RecordBatch -> Triton (gRPC, binary tensors) -> RecordBatch with ``output_col`` set.

    One client per worker (``create_client``); requests are split to the model's
    ``max_batch_size``; UNAVAILABLE / DEADLINE_EXCEEDED are retried ``max_retries`` times with
    exponential backoff starting at ``backoff_s``; each request times out after
    ``timeout_s``. Any other error, or a bad response, fails the batch. A batch goes out as
    requests of at most ``request_rows`` rows, ``in_flight`` of them at a time.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str = "",
        inputs: Callable[[pa.RecordBatch], Tensors] | None = None,
        output: str = "PRIVATIZED",
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
        # Retries happen in request() (configurable backoff, counted), not in the base class.
        RemoteModelHandler.__init__(self, namespace=NAMESPACE, num_retries=0)
        self._request_rows, self._in_flight = request_rows, in_flight
        forced = shared_memory is True  # --triton-shm on: an error if the server refuses
        if shared_memory == "auto":  # only a server on this host can map our regions
            host = url.rsplit(":", 1)[0].strip("[]")
            shared_memory = host in ("127.0.0.1", "localhost", "::1")
        self._shm: bool | str = True if forced else ("auto" if shared_memory else False)
        if headers is None:  # the job that started the server knows its token (mass.serving)
            from mass.serving import client_headers

            headers = client_headers(url) if self._shm else {}
        self._headers = dict(headers)
        self._url, self._version = url, str(version or "")
        self._timeout_s, self._max_retries, self._backoff_s = timeout_s, max_retries, backoff_s
        self._retries = Metrics.counter(NAMESPACE, "retries")
        self._init_arrow(
            model=model,
            inputs=inputs or ModifierInputs(),
            output=output,
            output_col=output_col,
            output_dim=output_dim,
            keep_input_as=keep_input_as,
            input_col=input_col,
        )

    def create_client(self) -> _TritonConnection:
        return _TritonConnection(
            self._url,
            self.model_name,
            self._version,
            shared_memory=self._shm,
            headers=self._headers,
        )

    def request(self, batch, model: _TritonConnection, inference_args=None):
        return self._each(batch, lambda tensors: self._infer(model, tensors))

    def _shm_output_shape(self, conn, tensors: Tensors, n: int) -> list[int] | None:
        """``[n, d]`` when this request can go through shared memory, else None."""
        if not conn.shm or any(a.dtype == object for a in tensors.values()):
            return None
        dims = conn.output_dims.get(self._output) or []
        d = self._output_dim or (dims[-1] if dims and dims[-1] > 0 else None)
        return [n, int(d)] if d else None

    # Process-wide: requests whose tensors went both ways through shared memory, and their
    # input + output bytes (what tests read to prove --triton-shm carried the tensors).
    shm_sent = {"requests": 0, "bytes": 0}
    _shm_sent_lock = threading.Lock()

    def _infer_shm(self, conn, req, out, shape: list[int]) -> np.ndarray:
        """Inputs copied once into this thread's region, output read back from its region."""
        import tritonclient.utils.shared_memory as shm

        arrays = [np.ascontiguousarray(arr) for _, arr in req]
        in_bytes, out_bytes = sum(a.nbytes for a in arrays), shape[0] * shape[1] * 4
        slot = conn.slot(in_bytes, out_bytes)
        shm.set_shared_memory_region(slot.in_h, arrays)
        offset = 0
        for (inp, _), a in zip(req, arrays, strict=True):
            inp.set_shared_memory(slot.in_name, a.nbytes, offset=offset)
            offset += a.nbytes
        out.set_shared_memory(slot.out_name, out_bytes)
        res = self._call(conn, req, out)
        meta = res.get_output(self._output)
        got = (list(meta.shape), meta.datatype) if meta is not None else (None, None)
        if got != (shape, "FP32"):  # the region holds only what the server says it wrote
            raise ResponseShapeError(
                f"model '{self.model_name}' returned {got} for {shape[0]} rows; expected "
                f"FP32 {shape}; check the model's config.pbtxt output dims"
            )
        result = shm.get_contents_as_numpy(slot.out_h, np.float32, shape).copy()
        with TritonModelHandler._shm_sent_lock:
            TritonModelHandler.shm_sent["requests"] += 1
            TritonModelHandler.shm_sent["bytes"] += in_bytes + out_bytes
        return result

    def _call(self, conn, req, out):
        return conn.client.infer(
            self.model_name,
            [inp for inp, _ in req],
            model_version=self._version,
            outputs=[out],
            client_timeout=self._timeout_s,
        )

    def _infer(self, conn: _TritonConnection, tensors: Tensors) -> np.ndarray:
        n = len(next(iter(tensors.values())))
        step = min(conn.max_batch or n, self._request_rows or n)
        chunks = [{k: v[i : i + step] for k, v in tensors.items()} for i in range(0, n, step)]
        if len(chunks) == 1 or self._in_flight <= 1:
            parts = [self._infer_once(conn, c) for c in chunks]
        else:
            # Requests in flight overlap this worker's (de)serialization with the server's
            # compute; a lone synchronous request leaves one of them idle (docs/performance.md).
            parts = list(
                conn.pool(self._in_flight).map(lambda c: self._infer_once(conn, c), chunks)
            )
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _infer_once(self, conn: _TritonConnection, tensors: Tensors) -> np.ndarray:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        req = []
        for name, arr in tensors.items():
            dtype = conn.inputs.get(name, "BYTES" if arr.dtype == object else None)
            if dtype is None:
                raise ServingError(
                    f"model '{self.model_name}' has no input '{name}' "
                    f"(inputs: {sorted(conn.inputs)}); wrong --model?"
                )
            inp = grpcclient.InferInput(
                name, list(arr.shape), "BYTES" if dtype == "STRING" else dtype
            )
            req.append((inp, arr))
        out = grpcclient.InferRequestedOutput(self._output)
        n = len(next(iter(tensors.values())))
        out_shape = self._shm_output_shape(conn, tensors, n)
        attempt = 0
        while True:
            try:
                if out_shape is not None:
                    return self._infer_shm(conn, req, out, out_shape)
                for inp, arr in req:
                    inp.set_data_from_numpy(arr)  # gRPC: raw binary tensor contents
                res = self._call(conn, req, out)
                return res.as_numpy(self._output)
            except InferenceServerException as e:
                msg = (e.message() or "").lower()
                if out_shape is not None and "should be at least" in msg:
                    # the model answered more bytes than [n, d] float32: ask again without
                    # shared memory so the response itself shows its shape and dtype
                    out_shape = None
                    out.unset_shared_memory()
                    continue
                lost_shm = out_shape is not None and "unable to find shared memory region" in msg
                retry = e.status() in RETRYABLE or lost_shm
                if not retry or attempt == self._max_retries:
                    raise ServingError(
                        f"Triton at {conn.url}, model '{self.model_name}': {e.status()} "
                        f"{e.message()} (after {attempt} retries); check the server"
                    ) from e
                if lost_shm:  # a restarted server forgot our regions
                    conn.reregister()
                self._retries.inc()
                time.sleep(self._backoff_s * 2**attempt)
                attempt += 1
