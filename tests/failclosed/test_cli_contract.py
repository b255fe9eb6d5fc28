"""The command-line contract (issue 23 item 6): a flag a command does not have is an error that
names it, with exit code 2, before any work: no output, no staging, no server. Beam pipeline
options pass only as flags Beam registers or after a literal ``--``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from beam_pipelines import anonymize
from mass import errors as E
from mass.cli import COMMANDS, build_parser, main, parse_command, subparser
from mass.testing.stand_ins import NumpyModifier, write_embeddings
from transforms.inference.function import FunctionModelHandler

INFO = {"name": "np", "version": 1, "sha256": "abc", "method": "test", "suppress": ["digit"],
        "preserve": [], "config_hash": "h", "dim": 16}  # fmt: skip


def _children() -> set[int]:
    """Pids whose parent is this process (a started tritonserver would be one)."""
    me, found = os.getpid(), set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(d.name))
    return found


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("in") / "emb.parquet")
    write_embeddings(path, rows=300, dim=16, row_group=100)
    return path


def _nothing_happened(out: Path, fc, before: set[int]) -> None:
    for p in (out, Path(f"{out}_quarantine"), Path(f"{out}_report")):
        assert not p.exists(), p
    assert fc.leftovers(out) == []
    assert _children() - before == set(), "a process was started"


TYPOS = {  # each was handed to Beam, which logged "Unparseable argument" and ran the job
    "--polcy": (["--polcy", "strict.yaml"], "did you mean --policy?"),
    "--noise-key-fle": (["--noise-key-fle", "K"], "did you mean --noise-key-file?"),
    "--model-versoin": (["--model-versoin", "7"], "did you mean --model-version?"),
}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_mistyped_flag_exits_2_naming_it_before_any_work(typo, src, tmp_path, capsys, fc):
    flags, hint = TYPOS[typo]
    out = tmp_path / "rel"
    before = _children()
    rc = main(["anonymize", "--input", src, "--output", str(out), "--model", "mod",
               "--repository", str(tmp_path / "repo"), *flags])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert f"mass anonymize: error: UnknownFlagError: unknown flag {typo}; {hint}" in err, err
    _nothing_happened(out, fc, before)


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_mistyped_flag_is_refused_by_the_job_entry_point_too(typo, src, tmp_path, fc):
    """``beam_pipelines.anonymize.run(argv)`` (what benches and tests call) keeps the rule,
    with an in-process model that would otherwise publish."""
    out = tmp_path / "rel"
    before = _children()
    with pytest.raises(E.UnknownFlagError, match=f"unknown flag {typo}; "):
        _job(src, out, *TYPOS[typo][0])
    _nothing_happened(out, fc, before)


def test_a_flag_beam_does_not_register_is_refused_even_if_it_looks_like_one(src, tmp_path, fc):
    out = tmp_path / "rel"
    for flags in (["--direct_num_worker", "1"], ["--", "--runner", "FnApiRunner", "--dask_foo=1"]):
        with pytest.raises(E.UnknownFlagError, match="unknown flag --(direct_num_worker|dask_foo)"):
            _job(src, out, *flags)
    with pytest.raises(E.UnknownFlagError, match="did you mean --direct_num_workers"):
        _job(src, out, "--direct_num_worker", "1")
    _nothing_happened(out, fc, set(_children()))


def _job(src: str, out: Path, *flags: str) -> dict:
    handler = FunctionModelHandler(NumpyModifier(), output_dim=16,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    argv = ["--input", src, "--output", str(out), "--model", "np", "--no-audit", *flags]
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


def test_beam_options_pass_as_registered_flags_and_after_a_double_dash(src, tmp_path):
    assert _job(src, tmp_path / "a", "--direct_num_workers", "1")["rows_out"] == 300
    summary = _job(src, tmp_path / "b", "--", "--runner", "FnApiRunner")
    assert summary["rows_out"] == 300


@pytest.mark.parametrize("shadow", [["--labels", "team=x"], ["--labels=lab.parquet"],
                                    ["--report", "r"], ["--pseudonymize_ids"]])  # fmt: skip
def test_a_job_flag_after_the_double_dash_is_refused_not_handed_to_beam(src, tmp_path, fc, shadow):
    """`-- --labels FILE` would be Dataflow's job label to Beam, and the audit would never see
    the labels file: a flag of the job's own after `--` is refused (under any spelling)."""
    out = tmp_path / "rel"
    before = set(_children())
    name = shadow[0].split("=")[0]
    with pytest.raises(E.UnknownFlagError, match=rf"^-- {name}: a flag of this job given after"):
        _job(src, out, "--", "--runner", "FnApiRunner", *shadow)
    _nothing_happened(out, fc, before)


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for every required argument of ``parser``."""
    argv: list[str] = []
    for a in parser._actions:
        value = str(next(iter(a.choices))) if a.choices else "x"
        if not a.option_strings and a.nargs != argparse.SUPPRESS and a.dest != "help":
            argv.append(value)
        elif a.required:
            argv += [a.option_strings[0], value]
    return argv


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_refuses_an_unknown_flag(name, capsys):
    """(Before `mass bench NAME`: what follows NAME is the script's, whose parser refuses.)"""
    argv = [name, "--definitely-not-a-flag", *_required(subparser(build_parser([name]), name))]
    with pytest.raises(E.UnknownFlagError, match="unknown flag --definitely-not-a-flag;"):
        parse_command(argv)
    assert main(argv) == 2
    assert "unknown flag --definitely-not-a-flag" in capsys.readouterr().err


def test_a_prefix_of_a_flag_is_not_taken_for_it():
    """No abbreviations: Beam's --label would otherwise be read as the job's --labels."""
    with pytest.raises(E.UnknownFlagError, match="unknown flag --polic;"):
        parse_command(["train", "--data", "x", "--out", "y", "--polic", "p.yaml"])


def test_anonymize_names_no_signing_key_flag_it_does_not_have(tmp_path, fc, monkeypatch):
    """The owner-key error of `mass anonymize` names the flag the command has
    (--signing-key-file, the README's route) and the environment variable, and no other."""
    fc.export_mod(tmp_path / "run", tmp_path / "repo", seed=0)
    write_embeddings(str(tmp_path / "emb.parquet"), rows=10, dim=16)
    monkeypatch.delenv("MASS_SIGNING_KEY_FILE")
    with pytest.raises(E.ConfigError, match="pass --signing-key-file FILE or set "
                       "MASS_SIGNING_KEY_FILE") as e:  # fmt: skip
        fc.mass_command(["anonymize", "--input", str(tmp_path / "emb.parquet"), "--output",
                         str(tmp_path / "rel"), "--model", "mod", "--repository",
                         str(tmp_path / "repo"), "--no-audit"])  # fmt: skip
    assert "--noise-key-file" not in str(e.value)
    assert not (tmp_path / "rel").exists()
