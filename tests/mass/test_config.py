"""MassConfig: defaults, parsing, validation up front, dependency warning, hash."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mass.config import MassConfig, conditional_entropy, validate_attributes
from mass.errors import ConfigError

LABELS = {
    "digit": np.arange(100) % 10,
    "colour": (np.arange(100) * 7) % 10,
    "parity": np.arange(100) % 2,
    "const": np.zeros(100, dtype=int),
}


def test_defaults_follow_table7_adience_row():
    c = MassConfig(suppress=("digit",))
    assert (c.batch_size, c.lr, c.w_rec, c.w_rstar) == (64, 0.00125, 1.0, 40.0)
    assert (c.weight_s("digit"), c.entropy_weight("digit"), c.weight_r("x")) == (5.0, 1.0, 1.0)
    assert c.hidden == (256, 128, 256) and c.sim_s == "cos" and c.sim_r == "kl"


def test_from_dict_nested_sections_and_overrides():
    c = MassConfig.from_dict(
        {
            "suppress": "colour",
            "weights": {"w_s": {"colour": 2.0}, "h_s": 0.5, "w_rstar": 10},
            "sim": {"suppress": "kl"},
            "modifier": {"hidden": [8, 8]},
            "mode": "adaptive",
            "adaptive": {"adversaries": "linear", "match": "mean"},
        },
        preserve="digit,parity",
        epochs=3,
    )
    assert c.suppress == ("colour",) and c.preserve == ("digit", "parity")
    assert c.weight_s("colour") == 2.0 and c.entropy_weight("colour") == 0.5
    assert c.sim_s == "kl" and c.hidden == (8, 8) and c.epochs == 3 and c.w_rstar == 10
    assert c.adaptive.adversaries == ("linear",) and c.adaptive_on


@pytest.mark.parametrize(
    "d, param",
    [
        ({"suppress": []}, "suppress"),
        ({"suppress": "a", "preserve": "a"}, "suppress/preserve"),
        ({"suppress": "a", "lrr": 1}, "lrr"),
        ({"suppress": "a", "mode": "paranoid"}, "mode"),
        ({"suppress": "a", "sim_s": "dot"}, "sim_s"),
        ({"suppress": "a", "epochs": 0}, "epochs"),
        ({"suppress": "a", "adaptive": {"match": "wasserstein"}}, "adaptive.match"),
        ({"suppress": "a", "adaptive": {"foo": 1}}, "foo"),
    ],
)
def test_invalid_values_name_the_parameter(d, param):
    with pytest.raises(ConfigError, match=param):
        MassConfig.from_dict(d)


def test_validate_rejects_unknown_and_single_class_attributes():
    with pytest.raises(ConfigError, match="'age' is not a label column"):
        MassConfig(suppress=("age",)).validate(LABELS)
    with pytest.raises(ConfigError, match="preserve: attribute 'const' has a single class"):
        MassConfig(suppress=("digit",), preserve=("const",)).validate(LABELS)


def test_preserved_function_of_suppressed_warns_with_measured_entropy(caplog):
    with caplog.at_level(logging.WARNING):
        validate_attributes(("digit",), ("parity",), LABELS)
    assert "H(parity|S) = 0.000 bits" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        validate_attributes(("parity",), ("digit",), LABELS)
    assert caplog.text == ""


def test_conditional_entropy_values():
    r = np.array([0, 1, 0, 1])
    assert conditional_entropy(r, np.array([0, 0, 1, 1])) == pytest.approx((1.0, 1.0))
    assert conditional_entropy(r, r) == pytest.approx((0.0, 1.0))


def test_config_hash_is_stable_and_sensitive():
    a = MassConfig.from_dict({"suppress": "x", "w_s": {"x": 1.0}})
    b = MassConfig.from_dict({"w_s": {"x": 1.0}, "suppress": ["x"]})
    assert a.config_hash() == b.config_hash() and len(a.config_hash()) == 64
    assert a.config_hash() != a.with_(seed=1).config_hash()
