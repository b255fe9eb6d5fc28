from __future__ import annotations

import logging

from mass.progress import RateLog


def test_rate_log_reports_every_n_batches_with_the_running_row_count(caplog):
    logger = logging.getLogger("mass.test_progress")
    rate = RateLog(logger, "anonymize", every=2)
    with caplog.at_level(logging.INFO, logger="mass.test_progress"):
        rate.add(100)
        assert not caplog.records
        rate.add(50)
        rate.add(7)
        rate.add(3)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("anonymize: 150 rows in ") and "rows/s on this worker" in lines[0]
    assert lines[1].startswith("anonymize: 160 rows in ")
