"""The job's Triton client: one model on one server, over gRPC or shared memory, with the one
retry loop (:meth:`TritonClient.infer`).

A batch goes out as requests of at most ``request_rows`` rows (and the model's
``max_batch_size``), ``in_flight`` of them at a time; UNAVAILABLE / DEADLINE_EXCEEDED (and a
shared-memory region a restarted server forgot) are retried ``max_retries`` times with
exponential backoff from ``backoff_s``; each request times out after ``timeout_s``. Any other
error fails with :class:`mass.errors.ServingError` naming the server, the model and the
status. The Beam handler (:mod:`transforms.inference.triton`) and the throughput benchmark
use this same client.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mass.errors import ResponseShapeError, ServingError
from mass.serving.shm import ShmSlot, clear_stale_regions, pow2
from mass.serving.tensors import Tensors

log = logging.getLogger(__name__)
RETRYABLE = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


@dataclass(frozen=True)
class RequestPolicy:
    timeout_s: float = 60.0
    max_retries: int = 5
    backoff_s: float = 0.5
    request_rows: int | None = 2048
    in_flight: int = 2


class TritonClient:
    """A gRPC client bound to ``model`` (``version``; "" = the newest) at ``url``.

    Creating it checks that the model is ready and reads its config (inputs, output dims,
    ``max_batch_size``). ``shared_memory``: True (an error if the server refuses it: its
    shared-memory API needs the access header ``headers``), "auto"/truthy (use it if allowed,
    else gRPC payloads) or False. ``on_retry`` is called once per retried request (the Beam
    handler counts them).
    """

    headers: dict[str, str] = {}  # noqa: RUF012 (read-only default; __init__ sets its own)
    # Process-wide: requests whose tensors went both ways through shared memory, and their
    # input + output bytes (what tests read to prove --triton-shm carried the tensors).
    shm_sent = {"requests": 0, "bytes": 0}  # noqa: RUF012
    _shm_sent_lock = threading.Lock()

    def __init__(
        self,
        url: str,
        model: str,
        version: str = "",
        *,
        shared_memory: bool | str = False,
        headers: dict[str, str] | None = None,
        policy: RequestPolicy = RequestPolicy(),  # noqa: B008 (frozen)
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.url, self.model, self.version = url, model, version
        self.policy, self.on_retry = policy, on_retry
        # the server's shared-memory API is restricted (mass.serving): every call carries this
        self.headers = dict(headers or {})
        self._slots: list[ShmSlot] = []
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
            clear_stale_regions(self.client, self.headers)

    # -- shared memory ---------------------------------------------------------------------
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

    def slot(self, in_bytes: int, out_bytes: int) -> ShmSlot:
        """This thread's pair of registered regions, grown (powers of two) to fit."""
        slot = getattr(self._local, "slot", None)
        if slot is None or slot.in_size < in_bytes or slot.out_size < out_bytes:
            if slot is not None:
                slot.close(self.client, self.headers)
            slot = ShmSlot(self.client, pow2(in_bytes), pow2(out_bytes), self.headers)
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

    # -- inference -------------------------------------------------------------------------
    def infer(self, tensors: Tensors, output: str, output_dim: int | None = None) -> np.ndarray:
        """``output`` of the model for ``tensors`` (named arrays of equal length)."""
        n = len(next(iter(tensors.values())))
        p = self.policy
        step = min(self.max_batch or n, p.request_rows or n)
        chunks = [{k: v[i : i + step] for k, v in tensors.items()} for i in range(0, n, step)]
        # through shared memory each response is copied once, straight into its rows of one
        # result array (no per-request copy + concatenate)
        shape = self._shm_output_shape(tensors, output, output_dim, n)
        result = np.empty(shape, np.float32) if shape is not None else None
        into = [None if result is None else result[i : i + step] for i in range(0, n, step)]

        def one(k: int) -> np.ndarray:
            return self._infer_once(chunks[k], output, output_dim, into[k])

        if len(chunks) == 1 or p.in_flight <= 1:
            parts = [one(k) for k in range(len(chunks))]
        else:
            # Requests in flight overlap this worker's (de)serialization with the server's
            # compute; a lone synchronous request leaves one of them idle
            # (docs/journal/performance-history.md).
            parts = list(self.pool(p.in_flight).map(one, range(len(chunks))))
        if result is not None and all(a is b for a, b in zip(parts, into, strict=True)):
            return result
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _shm_output_shape(self, tensors: Tensors, output: str, output_dim, n: int):
        """``[n, d]`` when this request can go through shared memory, else None."""
        if not self.shm or any(a.dtype == object for a in tensors.values()):
            return None
        dims = self.output_dims.get(output) or []
        d = output_dim or (dims[-1] if dims and dims[-1] > 0 else None)
        return [n, int(d)] if d else None

    def _request(self, tensors: Tensors, output: str):
        import tritonclient.grpc as grpcclient

        req = []
        for name, arr in tensors.items():
            dtype = self.inputs.get(name, "BYTES" if arr.dtype == object else None)
            if dtype is None:
                raise ServingError(
                    f"model '{self.model}' has no input '{name}' "
                    f"(inputs: {sorted(self.inputs)}); wrong --model?"
                )
            inp = grpcclient.InferInput(
                name, list(arr.shape), "BYTES" if dtype == "STRING" else dtype
            )
            req.append((inp, arr))
        return req, grpcclient.InferRequestedOutput(output)

    def _infer_once(self, tensors: Tensors, output: str, output_dim,
                    into: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """One request, retried: the only retry loop of the job's Triton path. ``into``: where
        a shared-memory response goes (returned); a gRPC response is returned as it is."""
        from tritonclient.utils import InferenceServerException

        req, out = self._request(tensors, output)
        n = len(next(iter(tensors.values())))
        out_shape = self._shm_output_shape(tensors, output, output_dim, n)
        attempt = 0
        while True:
            try:
                if out_shape is not None:
                    return self._infer_shm(req, out, output, out_shape, into)
                for inp, arr in req:
                    inp.set_data_from_numpy(arr)  # gRPC: raw binary tensor contents
                return self._call(req, out).as_numpy(output)
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
                if not retry or attempt == self.policy.max_retries:
                    raise ServingError(
                        f"Triton at {self.url}, model '{self.model}': {e.status()} "
                        f"{e.message()} (after {attempt} retries); check the server"
                    ) from e
                if lost_shm:  # a restarted server forgot our regions
                    self.reregister()
                if self.on_retry is not None:
                    self.on_retry()
                time.sleep(self.policy.backoff_s * 2**attempt)
                attempt += 1

    def _infer_shm(self, req, out, output: str, shape: list[int],
                   into: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """Inputs copied once into this thread's region, output read back from its region
        (into ``into`` when given: ``shape`` rows of the caller's result)."""
        import tritonclient.utils.shared_memory as shm

        arrays = [np.ascontiguousarray(arr) for _, arr in req]
        in_bytes, out_bytes = sum(a.nbytes for a in arrays), shape[0] * shape[1] * 4
        slot = self.slot(in_bytes, out_bytes)
        shm.set_shared_memory_region(slot.in_h, arrays)
        offset = 0
        for (inp, _), a in zip(req, arrays, strict=True):
            inp.set_shared_memory(slot.in_name, a.nbytes, offset=offset)
            offset += a.nbytes
        out.set_shared_memory(slot.out_name, out_bytes)
        res = self._call(req, out)
        meta = res.get_output(output)
        got = (list(meta.shape), meta.datatype) if meta is not None else (None, None)
        if got != (shape, "FP32"):  # the region holds only what the server says it wrote
            raise ResponseShapeError(
                f"model '{self.model}' returned {got} for {shape[0]} rows; expected "
                f"FP32 {shape}; check the model's config.pbtxt output dims"
            )
        view = shm.get_contents_as_numpy(slot.out_h, np.float32, shape)
        if into is None or into.shape != view.shape:
            into = np.empty(view.shape, np.float32)
        np.copyto(into, view)
        with TritonClient._shm_sent_lock:
            TritonClient.shm_sent["requests"] += 1
            TritonClient.shm_sent["bytes"] += in_bytes + out_bytes
        return into

    def _call(self, req, out):
        return self.client.infer(
            self.model,
            [inp for inp, _ in req],
            model_version=self.version,
            outputs=[out],
            client_timeout=self.policy.timeout_s,
        )
