"""Progress for people and for cron: a bar on a terminal, a periodic rate line otherwise.

:class:`RateLog` is the one rate line (Beam workers' rows/s, and the training loop when its
output is not a terminal): one ``logging`` record every ``every`` steps, never a carriage-
return redraw, so a log file gets a line per period instead of hundreds of bar updates.
:func:`progress_bar` picks: tqdm when stderr is a TTY, a :class:`RateLog` otherwise.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


class RateLog:
    """Counts units per step and logs the running count and rate every ``every`` steps.

    Also stands in for a tqdm bar off a terminal (``update``, ``set_postfix``, ``close``):
    with ``total`` the line reads ``what: done/total unit in s (rate unit/s) key=value...``.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        every: int,
        *,
        unit: str = "rows",
        scope: str = " on this worker",
        total: int | None = None,
        initial: int = 0,
    ) -> None:
        if logger.level == logging.NOTSET:  # Beam's import-time basicConfig leaves root at WARNING
            logger.setLevel(logging.INFO)
        self._log, self._what, self._every = logger, what, max(1, every)
        self._unit, self._scope, self._total = unit, scope, total
        self._t0, self._rows, self._batches = time.monotonic(), 0, 0
        self._initial, self._logged_at = initial, 0
        self._postfix: dict[str, Any] = {}

    def add(self, rows: int) -> None:
        self._rows += rows
        self._batches += 1
        if self._batches % self._every == 0:
            self._emit()

    update = add  # tqdm's name: a RateLog replaces the bar when stderr is not a terminal

    def set_postfix(self, values: dict[str, Any] | None = None, refresh: bool = False) -> None:
        self._postfix = dict(values or {})

    def close(self) -> None:
        if self._batches > self._logged_at:  # the last, partial period
            self._emit()

    def _emit(self) -> None:
        self._logged_at = self._batches
        dt = time.monotonic() - self._t0
        done = f"{self._rows}" if self._total is None else f"{self._initial + self._rows}/{self._total}"
        post = "".join(f" {k}={v}" for k, v in self._postfix.items())
        self._log.info(
            "%s: %s %s in %.1f s (%.0f %s/s%s)%s",
            self._what,
            done,
            self._unit,
            dt,
            self._rows / max(dt, 1e-9),
            self._unit,
            self._scope,
            post,
        )


def progress_bar(
    total: int,
    *,
    desc: str,
    unit: str,
    initial: int = 0,
    lines: int = 20,
    logger: logging.Logger | None = None,
):
    """A tqdm bar when stderr is a terminal, else a :class:`RateLog` of about ``lines`` lines."""
    stream = sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False)
    return RateLog(
        logger or logging.getLogger("mass.progress"),
        desc,
        every=max(1, (total - initial) // max(1, lines)),
        unit=unit,
        scope="",
        total=total,
        initial=initial,
    )
