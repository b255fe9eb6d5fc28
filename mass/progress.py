"""Progress that fits where it is read: a tqdm bar on a terminal, a periodic log line otherwise.

A cron job's log gets one ``desc: step k/N (p%), R rows/s`` line every ``every`` seconds and
one at the end, never carriage-return redraws. Interface: ``update(n)``, ``set_postfix(d)``,
``close()`` (the subset of tqdm the callers use). :class:`RateLog` is the Beam workers' line
(``what: N rows in s (R rows/s on this worker)`` every ``every`` batches).
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger(__name__)


class RateLog:
    """Counts rows per batch and logs the worker's rate every ``every`` batches."""

    def __init__(self, logger: logging.Logger, what: str, every: int) -> None:
        if logger.level == logging.NOTSET:  # Beam's import-time basicConfig leaves root at WARNING
            logger.setLevel(logging.INFO)
        self._log, self._what, self._every = logger, what, max(1, every)
        self._t0, self._rows, self._batches = time.monotonic(), 0, 0

    def add(self, rows: int) -> None:
        self._rows += rows
        self._batches += 1
        if self._batches % self._every == 0:
            dt = time.monotonic() - self._t0
            self._log.info(
                "%s: %d rows in %.1f s (%.0f rows/s on this worker)",
                self._what,
                self._rows,
                dt,
                self._rows / max(dt, 1e-9),
            )


class LogProgress:
    """tqdm's interface as periodic INFO lines (for logs that are not a terminal)."""

    def __init__(self, total: int, *, desc: str, initial: int = 0, rows_per_step: int = 1,
                 every: float = 30.0) -> None:  # fmt: skip
        self.total, self.desc, self.n = total, desc, initial
        self.rows_per_step, self.every = rows_per_step, every
        self.postfix: dict = {}
        self._t0 = self._last = time.perf_counter()
        self._n0 = initial

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.perf_counter() - self._last >= self.every:
            self._line()

    def set_postfix(self, postfix: dict, refresh: bool = False) -> None:
        self.postfix = dict(postfix)

    def close(self) -> None:
        if self.n > self._n0:
            self._line()

    def _line(self) -> None:
        now = time.perf_counter()
        self._last = now
        rate = (self.n - self._n0) * self.rows_per_step / max(now - self._t0, 1e-9)
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        log.info("%s: step %d/%d (%.0f%%), %.0f rows/s%s", self.desc, self.n, self.total,
                 100.0 * self.n / max(self.total, 1), rate, extra)  # fmt: skip


def progress(total: int, *, desc: str, enabled: bool = True, initial: int = 0,
             rows_per_step: int = 1, unit: str = "step", stream=None):  # fmt: skip
    """None when disabled; a tqdm bar when ``stream`` (default stderr) is a terminal; else a
    :class:`LogProgress`."""
    if not enabled:
        return None
    stream = sys.stderr if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, file=stream)
    return LogProgress(total, desc=desc, initial=initial, rows_per_step=rows_per_step)
