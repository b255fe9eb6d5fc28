"""calibrate.space: every candidate of the search is a valid configuration of its method, so
a misspelt knob or a wrong value fails here and not hours into a calibration."""

from __future__ import annotations

import pytest

from mass.calibrate.space import SEARCH_SPACE, Candidate, params_for
from mass.errors import ConfigError
from mass.methods import get_method


def _parsed(c: Candidate):
    method = get_method(c.method)  # an unknown method name is a ConfigError too
    p = method.parse(params_for(c, seed=0, epochs=None), suppress=["s"], preserve=["r"])
    assert isinstance(p, method.Params)
    return p


@pytest.mark.parametrize("c", SEARCH_SPACE, ids=lambda c: c.name)
def test_every_candidate_parses_with_its_methods_params_and_keeps_each_knob(c):
    typed = _parsed(c).to_dict()
    for key, value in c.params.items():
        if isinstance(value, dict):  # a nested section (mass's adaptive): each knob kept
            assert {k: typed[key][k] for k in value} == value, key
        elif key in ("w_s", "h_s", "w_r"):  # MaSS: a scalar weight is every attribute's
            assert typed[f"{key}_default"] == value, key
        else:
            assert typed[key] == value, key
    if c.transductive:  # tried first under --transductive: the method must bind its rows
        assert get_method(c.method).fits_transductively() and typed["transductive"] is True


def test_a_misspelt_knob_in_a_candidate_is_refused_by_name():
    repair = next(c for c in SEARCH_SPACE if c.method == "ot_repair")
    misspelt = Candidate("typo", repair.method, {**repair.params, "cel_rows": 10})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['cel_rows'\]"):
        _parsed(misspelt)
    mass = next(c for c in SEARCH_SPACE if c.method == "mass")
    nested = Candidate("typo", "mass", {**mass.params, "adaptive": {"output_nois": 0.1}})
    with pytest.raises(ConfigError, match="output_nois"):
        _parsed(nested)


def test_candidate_names_are_unique():
    names = [c.name for c in SEARCH_SPACE]
    assert len(set(names)) == len(names)
