"""Every method's params: a frozen typed dataclass; unknown keys and wrong types are named."""

from __future__ import annotations

import dataclasses

import pytest

from mass.config import METHOD_NAMES, MassConfig
from mass.errors import ConfigError
from mass.methods import get_method, method_names
from mass.methods._common import toy_dataset


def test_the_torch_free_method_list_is_the_registry():
    assert sorted(METHOD_NAMES) == method_names()


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_params_are_frozen_and_name_unknown_keys(name):
    method = get_method(name)
    p = method.parse({}, suppress=["a"], preserve=["b"])
    assert dataclasses.is_dataclass(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.seed = 5  # type: ignore[misc]
    with pytest.raises(ConfigError, match="bogus_knob"):
        method.parse({"bogus_knob": 1}, suppress=["a"], preserve=["b"])


@pytest.mark.parametrize(
    ("name", "params", "needle"),
    [
        ("gaussian", {"sigma": "loud"}, r"params.sigma='loud': expected float"),
        ("inlp", {"iterations": 2.5}, r"params.iterations=2.5: expected int"),
        ("leace", {"shrinkage": "yes"}, r"params.shrinkage='yes': expected bool"),
        ("end", {"hidden": ["a"]}, r"params.hidden\[0\]='a': expected int"),
        ("genfilter", {"label_source": "oracle"}, r"label_source='oracle': choose one of"),
        ("unlearning", {"epochs": 0}, r"params.epochs=0: must be >= 1"),
        ("leace_iterated", {"seed": True}, r"params.seed=True: expected int"),
    ],
)
def test_wrong_types_and_values_are_named(name, params, needle):
    with pytest.raises(ConfigError, match=needle):
        get_method(name).parse(params, suppress=["a"], preserve=[])


def test_values_from_yaml_and_the_cli_are_typed():
    p = get_method("end").parse({"lr": "1e-3", "epochs": 3.0, "hidden": "16,8"},
                                suppress=["a"], preserve=[])  # fmt: skip
    assert (p.lr, p.epochs, p.hidden) == (1e-3, 3, (16, 8))


def test_mass_params_are_the_mass_config():
    cfg = get_method("mass").parse({"epochs": 2}, suppress=["a"], preserve=["b"], seed=4)
    assert isinstance(cfg, MassConfig) and (cfg.epochs, cfg.seed) == (2, 4)
    with pytest.raises(ConfigError, match="bogus"):
        get_method("mass").parse({"bogus": 1}, suppress=["a"], preserve=[])


def test_resolve_records_every_default_and_fit_uses_them():
    method = get_method("gaussian")
    resolved = method.resolve({"sigma": 0.25}, suppress=["a"], preserve=["b"])
    assert resolved == {"method": "gaussian", "suppress": ["a"], "preserve": ["b"],
                        "seed": 0, "sigma": 0.25}  # fmt: skip
    fit = method.fit(toy_dataset(50), suppress=["a"], preserve=["b"], params={"sigma": 0.25})
    assert fit.modifier.spec.sigma == 0.25 and fit.seconds > 0


def test_every_method_fits_the_same_modifier_from_the_same_seed_whatever_the_global_rng():
    """A re-run (`dvc repro`) must give the same modifier bytes: nothing may draw from torch's
    global generator before the method seeds it (ot_repair's class predictor once did)."""
    import hashlib

    import torch

    from mass.methods import get_method, method_names
    from mass.methods._common import toy_dataset

    ds = toy_dataset(300, dim=8, classes={"s": 3, "u": 2}, seed=3)
    short = {"mass": {"epochs": 2, "branch_epochs": 1, "agnostic_epochs": 1},
             "genfilter": {"vae_epochs": 2, "filter_epochs": 2},
             "unlearning": {"epochs": 2}, "end": {"epochs": 2}}  # fmt: skip
    for name in method_names():
        digests = []
        for draw in (1, 2):
            torch.manual_seed(100 + draw)
            fit = get_method(name).fit(ds, suppress=["s"], preserve=["u"], seed=0,
                                       params=short.get(name, {}), progress=False)  # fmt: skip
            h = hashlib.sha256()
            for _, v in sorted(fit.modifier.state_dict().items()):
                h.update(v.numpy().tobytes())
            digests.append(h.hexdigest())
        assert digests[0] == digests[1], name
