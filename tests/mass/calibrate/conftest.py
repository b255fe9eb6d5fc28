"""Fixtures shared by the calibration tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def every_candidate_passes(monkeypatch):
    """Calibration's noise search (``mass.calibrate.search.bisect_noise``) replaced: every
    candidate passes validation at noise 0 with the same privacy and named-utility numbers
    (what the search does after it, ranking and later checks, runs for real). The first
    fold's verdict, validation's own early look (``_first_fold_check``), is off with it."""
    from mass.calibrate import search as S

    def passing(parts, audit, deadline, comfortable=2.0, now=None, key_gate=False, **_):
        pt = {"noise": 0.0, "privacy": {}, "privacy_ok": True, "utility_ok": True,
              "passed": True, "excess": 0.0, "fraction": 0.97, "fidelity": 0.5,
              "utility": {"u": {"logreg": 0.9}}}  # fmt: skip
        return {"points": [pt], "chosen": pt, "reason": "passes at noise 0.0"}

    monkeypatch.setattr(S, "bisect_noise", passing)
    monkeypatch.setattr(S, "_first_fold_check", lambda *a: None)
    return passing
