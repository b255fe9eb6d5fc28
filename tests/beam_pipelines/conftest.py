"""Beam test pipelines on FnApiRunner (the stock DirectRunner would try to download Prism)."""

from __future__ import annotations

import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline


@pytest.fixture
def beam_pipeline():
    return lambda: TestPipeline(runner=FnApiRunner())
