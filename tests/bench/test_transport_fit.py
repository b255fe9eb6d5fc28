"""bench/transport_fit.py: the transport fit as calibration runs it, byte for byte the fit
it replaced (torch's column sort, classes gathered by masks)."""

from __future__ import annotations

import json

from bench.transport_fit import main


def test_the_fit_and_the_fit_it_replaced_give_the_same_bytes(capsys):
    assert main(["--rows", "401", "--dim", "12", "--classes", "3", "--repeat", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["fit"] for d in lines] == ["numpy_sort_runs", "torch_sort_masks"]
    assert lines[0]["sha256"] == lines[1]["sha256"]
    assert all(d["rows"] == 401 and d["cpu_seconds"] >= 0 for d in lines)
