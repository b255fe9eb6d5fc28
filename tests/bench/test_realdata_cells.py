"""bench/realdata_cells.py: a ``"certified[*f]"`` cell count stands for the cells the release
rows certify (times f), as calibration's certified candidates get; anything else is refused
naming the value."""

from __future__ import annotations

import pytest

from bench.realdata_cells import _cell_count


def test_a_certified_cell_count_resolves_to_the_release_rows_count_times_its_factor():
    assert _cell_count({"cell_count": "certified", "passes": 1}, 82) == {"cell_count": 82,
                                                                         "passes": 1}  # fmt: skip
    assert _cell_count({"cell_count": "certified*2"}, 82) == {"cell_count": 164}
    assert _cell_count({"cell_count": "certified*0.5"}, 7) == {"cell_count": 4}
    assert _cell_count({"cell_count": 30}, 82) == {"cell_count": 30}
    assert _cell_count({"cell_rows": 10}, 82) == {"cell_rows": 10}


def test_a_cell_count_that_is_neither_a_number_nor_certified_is_refused_by_value():
    with pytest.raises(SystemExit, match="'certfied'"):
        _cell_count({"cell_count": "certfied"}, 82)


def test_gate_flag_with_and_without_its_folds():
    from bench.realdata_cells import gate_folds

    assert gate_folds(["alcohol", "[]"]) == (False, None)
    assert gate_folds(["alcohol", "[]", "--gate"]) == (True, None)
    assert gate_folds(["alcohol", "[]", "--gate", "5", "--max-rows", "900"]) == (True, 5)
    assert gate_folds(["alcohol", "[]", "--gate", "--max-rows", "900"]) == (True, None)
