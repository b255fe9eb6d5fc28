"""`mass train --transductive`: the release rows are the training rows; the transductive
repair is tried first and the fitted model is bound to those rows (mass.fitrows)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from mass.calibrate.space import SEARCH_SPACE, ordered
from mass.cli import main
from mass.fitrows import ids_digest
from mass.modifiers import load_modifier
from mass.synthetic import write_synthetic


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("transductive") / "rows.parquet")
    write_synthetic(path, n=200, dim=8, seed=0)
    return path


def test_the_transductive_candidates_run_first_and_only_when_asked():
    inductive = ordered(SEARCH_SPACE, ["u"])
    transductive = ordered(SEARCH_SPACE, ["u"], transductive=True)
    assert not any(c.transductive for c in inductive)
    assert transductive[0].transductive and transductive[0].method == "ot_repair"
    assert transductive[1:] == inductive  # then the usual search, judged on the release rows


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--val", "VAL"], "--val VAL: a --transductive run is judged on the release rows"),
        (["--method", "leace"], "--transductive with --method leace: only ot_repair"),
    ],
)
def test_transductive_refuses_a_val_split_and_a_method_that_cannot_bind(
    data, tmp_path, capsys, extra, needle
):
    argv = ["train", "--data", data, "--out", str(tmp_path / "r"), "--suppress", "s"]
    assert main([*argv, "--transductive", "--no-progress", *extra]) == 2
    assert needle in capsys.readouterr().err


def test_an_explicit_transductive_fit_is_bound_to_its_training_rows(data, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--data", data, "--out", str(out), "--suppress", "s", "--preserve", "u"]
    assert main([*argv, "--method", "ot_repair", "--transductive", "--no-progress"]) == 0
    spec = load_modifier(str(out / "modifier.pt")).spec
    assert spec.fit_rows == 200
    assert spec.fit_ids_sha256 == ids_digest(pq.read_table(data).column("id"))


def test_whether_a_method_may_fit_transductively_is_its_own_declaration(monkeypatch):
    """The capability is read from the method (a ``transductive`` knob in its Params), never
    from its name: a method registered under another name with that knob is accepted, one
    without it is refused with the names of those that can."""
    import argparse
    from dataclasses import dataclass

    from mass.errors import ConfigError
    from mass.methods import METHODS, Method, Params
    from mass.methods.base import knob
    from mass.training import transductive_params

    @dataclass(frozen=True)
    class BoundParams(Params):
        transductive: bool = knob(False, help="fitted on the rows it releases")

    class Bound(Method):
        Params = BoundParams

    monkeypatch.setitem(METHODS, "bound_toy", Bound)
    able = sorted(n for n, cls in METHODS.items() if cls.fits_transductively())
    assert able == ["bound_toy", "ot_repair"]
    args = argparse.Namespace(val=None)
    assert transductive_params(args, "bound_toy", False, {"k": 1}) == {"k": 1, "transductive": True}
    with pytest.raises(ConfigError, match="only bound_toy or ot_repair fits transductively"):
        transductive_params(args, "leace", False, {})
