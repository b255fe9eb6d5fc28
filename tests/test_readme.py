"""The README's examples, held against the code: every `mass` command line in its shell
blocks parses with the real CLI (each flag exists, takes its value, and nothing is left over),
the Python blocks compile and import only public names, and a job without the signing key it
needs names a flag the command has.

Running the whole "Using your own Parquet" route (a calibrated `mass train` on a public table,
export, a served anonymize, audit) takes minutes; `tests/test_examples.py` runs both routes of
"In your own code" end to end and `tests/test_dvc_route.py` the demo's commands."""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest

from mass.cli import parse_command

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def _mass_lines() -> list[list[str]]:
    """Each `mass ...` command of the README's bash blocks (continuations joined, comments
    and shell operators cut)."""
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;", line.split("#", 1)[0]):
                words = shlex.split(part)
                if words and words[0] == "mass":
                    out.append([os.path.expanduser(w) for w in words[1:]])
    return out


def test_the_readme_shows_the_commands_it_documents():
    commands = {argv[0] for argv in _mass_lines()}
    assert {"keygen", "train", "export", "anonymize", "audit"} <= commands


@pytest.mark.parametrize("argv", _mass_lines(), ids=lambda a: " ".join(a[:1]))
def test_every_readme_mass_command_parses_with_the_real_cli(argv):
    args, beam = parse_command(argv)  # an unknown flag or a missing value raises / exits
    assert args.command == argv[0] and beam == []


@pytest.mark.parametrize("code", _blocks("python"), ids=lambda c: c.split("\n", 1)[0][:30])
def test_readme_python_blocks_compile_and_import_public_names(code):
    import importlib

    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_anonymize_without_a_signing_key_names_its_own_flag(tmp_path, tiny_repo, monkeypatch):
    """The README's `mass anonymize` finds the owner key by --signing-key-file; without any
    key the error names that flag (the command has it) and where else it looked."""
    from mass import cli

    monkeypatch.delenv("MASS_SIGNING_KEY_FILE", raising=False)
    monkeypatch.setenv("MASS_LOCAL_CONFIG", "")
    (tmp_path / "in.parquet").write_bytes(b"")  # never read: the key is checked first
    argv = ["anonymize", "--input", str(tmp_path / "in.parquet"), "--output",
            str(tmp_path / "rel"), "--model", "double", "--repository", str(tiny_repo),
            "--no-audit"]  # fmt: skip
    args, beam = parse_command(argv)
    from mass.errors import ConfigError

    with pytest.raises(ConfigError, match="pass --signing-key-file FILE or set"):
        cli.run_command(args, beam)
    assert not (tmp_path / "rel").exists()
