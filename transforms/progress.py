"""A worker's rows/s log line, shared by the job DoFns."""

from __future__ import annotations

import logging
import time


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
