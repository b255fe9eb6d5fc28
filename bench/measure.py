"""Wall time, CPU seconds and peak RSS of a block, over this process and its descendants.

Shared by the throughput parts: tritonserver and its python stubs, Beam SDK workers and Dask
workers are children of the benchmark, so their memory and CPU count too.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class TreeRss:
    """Samples RSS and CPU time of this process and all its descendants in a thread.

    Keeps the peak RSS (own and tree) and the CPU seconds the tree spent while sampling:
    on a shared machine CPU seconds per row move far less than wall time does.
    """

    def __init__(self, *, interval: float = 0.05) -> None:
        import psutil

        self._proc, self._interval = psutil.Process(), interval
        self.peak_self = self.peak_tree = 0
        self._cpu0: dict[int, float] = {}
        self._cpu: dict[int, float] = {}
        self._label: dict[int, str] = {}
        self.sampler_cpu = 0.0  # CPU of the sampling thread itself: not counted as the tree's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        import psutil

        own = self._proc.memory_info().rss
        total = own
        procs = [self._proc, *self._proc.children(recursive=True)]
        for p in procs:
            try:
                if p is not self._proc:
                    total += p.memory_info().rss
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system
                if p.pid not in self._label:
                    self._label[p.pid] = _label(p, self._proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        self.peak_self, self.peak_tree = max(self.peak_self, own), max(self.peak_tree, total)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_by_process.values())

    @property
    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds per kind of process (this one, tritonserver, its stub, Dask, moto)."""
        out: dict[str, float] = {}
        for pid, c in self._cpu.items():
            label = self._label.get(pid, "other")
            c -= self._cpu0.get(pid, 0.0) + (self.sampler_cpu if pid == self._proc.pid else 0.0)
            out[label] = round(out.get(label, 0.0) + c, 2) + 0.0  # no -0.0
        return out

    def _loop(self) -> None:
        t0 = time.thread_time()
        while not self._stop.wait(self._interval):
            self.sample()
            self.sampler_cpu = time.thread_time() - t0

    def __enter__(self) -> TreeRss:
        self.sample()
        self._cpu0 = dict(self._cpu)  # processes alive at the start count from now
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def as_dict(self) -> dict:
        return {
            "peak_rss_mb": round(self.peak_self / 2**20, 1),
            "peak_tree_rss_mb": round(self.peak_tree / 2**20, 1),
            "tree_cpu_s": round(self.cpu_seconds, 2),
            "cpu_s_by_process": self.cpu_by_process,
            "sampler_cpu_s": round(self.sampler_cpu, 2),
        }


KINDS = ("tritonserver", "triton_python_backend_stub", "dask worker", "dask scheduler",
         "moto_server")  # fmt: skip


def _label(p, me) -> str:
    """What a process of the tree is, for the CPU breakdown."""
    if p.pid == me.pid:
        return "this process"
    try:
        while p is not None and p.pid != me.pid:  # a Dask nanny's worker: its parent's kind
            cmd = " ".join(p.cmdline())
            kind = next((k for k in KINDS if k in cmd), None)
            if kind:
                return kind
            p = p.parent()
    except Exception:  # gone, or not ours to read
        pass
    return "other"


def max_load() -> float:
    """The highest 1-min load average at which a speed figure counts: 0.75 per CPU (1.5 on
    the project's 2-core box). Above it other work shares the cores: the figure is recorded
    but marked invalid (``load_ok`` false), not comparable with quiet-machine figures."""
    import os

    return 0.75 * (os.cpu_count() or 1)


def load_record(before: float, after: float) -> dict:
    """``load_before``/``load_after`` (1-min load averages) and whether both are quiet."""
    limit = max_load()
    return {"load_before": round(before, 2), "load_after": round(after, 2),
            "load_limit": round(limit, 2), "load_ok": max(before, after) <= limit}  # fmt: skip


@contextmanager
def measured(record: dict, rows: int):
    """Time the block and sample RSS; fill ``record`` with seconds, rows/s, rows per CPU-second,
    peaks and the 1-min load before and after (:func:`load_record`)."""
    import os

    load0 = os.getloadavg()[0]
    with TreeRss() as rss:
        t0 = time.perf_counter()
        yield
        secs = time.perf_counter() - t0
    record.update(rows=rows, seconds=round(secs, 3), rows_per_s=round(rows / secs, 1))
    record.update(rss.as_dict(), rows_per_cpu_s=round(rows / max(rss.cpu_seconds, 1e-9), 1))
    record.update(load_record(load0, os.getloadavg()[0]))
