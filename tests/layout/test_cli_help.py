"""`mass X --help` for every subcommand: every option has a help line, valid choices are
shown, and nothing third-party lands on stderr. Logs fit for cron: off a terminal a run
writes periodic rate lines, never carriage-return bar redraws."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
import yaml

from mass.cli import COMMANDS, build_parser


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _run(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # warnings a user would see, shown
    return subprocess.run([sys.executable, "-m", "mass.cli", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    return {name: _run(name, "--help") for name in COMMANDS}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_documents_every_option_and_shows_its_choices(name, helps):
    r = helps[name]
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", f"`mass {name} --help` wrote to stderr:\n{r.stderr}"
    text = " ".join(r.stdout.split())  # argparse wraps lines: compare word sequences
    for action in _subparser(name)._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert action.help and action.help != argparse.SUPPRESS, f"mass {name} {flag}: no help"
        for opt in action.option_strings:
            assert opt in text, f"mass {name} --help does not show {opt}"
        for choice in action.choices or ():
            assert str(choice) in text, f"mass {name} {flag}: choice {choice!r} not shown"


def test_train_help_lists_every_method_and_mode(helps):
    from mass.methods import METHODS

    text = " ".join(helps["train"].stdout.split())
    assert METHODS and all(m in text for m in METHODS), sorted(METHODS)
    assert "{faithful,adaptive}" in text


def test_top_level_help_lists_every_command():
    r = _run("--help")
    assert r.returncode == 0 and r.stderr == ""
    assert all(name in r.stdout for name in COMMANDS)


def test_training_off_a_terminal_logs_rate_lines_not_bar_redraws(tmp_path):
    from mass.synthetic import write_synthetic

    write_synthetic(str(tmp_path / "train.parquet"), n=256, dim=8, seed=0)
    cfg = {"train": {"epochs": 3, "branch_epochs": 1, "agnostic_epochs": 1, "batch_size": 8,
                     "modifier": {"hidden": [16]}, "suppress": ["s"]}}  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg))
    r = _run("train", "--data", "train.parquet", "--method", "mass", "--config", "params.yaml",
             "--out", "run", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert "\r" not in out  # no tqdm redraws in a log file
    rate = [line.split("train G: ")[1] for line in out.splitlines() if "train G: step " in line]
    # a line every 30 s and one at the end (mass.progress.LogProgress): 3 epochs x 32 steps
    assert rate and rate[-1].startswith("step 96/96 (100%), "), out[-3000:]
    assert rate[-1].split(", ")[1].endswith(" rows/s")


def test_top_level_help_shows_each_commands_own_help_line():
    """A command's one-line help has one home, its module's ``HELP``."""
    import importlib

    r = _run("--help")
    text = " ".join(r.stdout.split())
    for name, modname in COMMANDS.items():
        assert importlib.import_module(modname).HELP in text, name


def test_a_new_command_needs_only_its_line_in_commands(monkeypatch, capsys):
    """One line in ``mass.cli.COMMANDS`` adds a command (docs/architecture.md): the other
    commands still parse, and `mass --help` lists it (as unavailable, naming what is missing,
    while its module cannot be imported) instead of failing."""
    monkeypatch.setitem(COMMANDS, "ghost", "mass.commands.ghost_not_there")
    assert _subparser("keygen") is not None
    with pytest.raises(SystemExit):
        build_parser([]).parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "ghost (unavailable: mass.commands.ghost_not_there is not installed)" in out
