"""bench/certificate.py: one JSON line per setting, with the truth each bound must cover."""

from __future__ import annotations

import json

from bench.certificate import main


def test_prints_a_line_per_setting_and_its_bounds_cover_the_truth(capsys):
    assert main(["--rows", "400,800", "--cells", "2,4", "--draws", "5"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["rows"], d["cells"], d["kind"]) for d in lines] == [
        (400, 2, "independent"), (400, 4, "independent"), (400, 10, "one skewed cell of 10"),
        (800, 2, "independent"), (800, 4, "independent"), (800, 10, "one skewed cell of 10"),
    ]  # fmt: skip
    for d in lines:
        assert d["refused"] == 0 and d["draws"] == 5
        assert d["balanced"]["mean"] >= d["truth"]["balanced"], d
    # fewer rows per cell, a looser bound
    assert lines[0]["balanced"]["mean"] < lines[1]["balanced"]["mean"]
    assert lines[3]["balanced"]["mean"] < lines[0]["balanced"]["mean"]
