"""mass.names: one rule for a list of names wherever it is given, and one definition of the
data contract's column flags for every command that reads embeddings."""

from __future__ import annotations

import argparse

import pytest

from mass.errors import ConfigError
from mass.names import EMB_HELP, ID_HELP, parse_names, split_names

TEXT = " a, ,b ,"


def _parser(add_arguments) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(p)
    return p


def _command_parsers() -> dict[str, argparse.ArgumentParser]:
    from beam_pipelines import extract, plan
    from mass.commands import audit, train

    return {
        "mass anonymize": _parser(plan.add_arguments),
        "mass extract": _parser(extract.add_arguments),
        "mass audit": _parser(audit.add_arguments),
        "mass train": _parser(train.add_arguments),
    }


def test_split_names_drops_blanks_and_the_spaces_around_names():
    assert split_names(TEXT) == ("a", "b")
    assert split_names(None) == split_names("") == split_names(" , ") == ()
    assert parse_names(["a", "b"], where="x") == parse_names(TEXT, where="x") == ("a", "b")


def test_every_reader_of_a_name_list_reads_it_the_same():
    from mass.api.frames import names
    from mass.audit.policy import policy_from_dict
    from mass.config import MassConfig

    parsers = _command_parsers()
    must = ["--input", "i", "--output", "o", "--model", "m"]
    read = {
        "params.yaml train.suppress": MassConfig.from_dict({"suppress": TEXT}).suppress,
        "params.yaml audit.watch": policy_from_dict({"watch": TEXT}).watch,
        "the Python API": tuple(names(TEXT)),
        "mass audit --suppress": parsers["mass audit"]
        .parse_args(["--release", "r", "--labels", "l", "--report", "o", "--suppress", TEXT])
        .suppress,
        "mass anonymize --allow-columns": tuple(
            parsers["mass anonymize"].parse_args([*must, "--allow-columns", TEXT]).allow_columns
        ),
        "mass extract --keep-columns": tuple(
            parsers["mass extract"].parse_args([*must, "--keep-columns", TEXT]).keep_columns
        ),
    }
    assert {k: v for k, v in read.items() if v != ("a", "b")} == {}


@pytest.mark.parametrize("bad", [[1, "b"], {"a": 1}, 3])
def test_a_list_that_is_not_names_fails_naming_where_it_was_given(bad):
    from mass.audit.policy import policy_from_dict
    from mass.config import MassConfig

    msg = "expected a list of names or a comma-separated string"
    with pytest.raises(ConfigError, match=f"^suppress: {msg}"):
        MassConfig.from_dict({"suppress": bad})
    with pytest.raises(ConfigError, match=f"^audit.watch: {msg}"):
        policy_from_dict({"watch": bad})


def test_every_command_that_reads_embeddings_has_the_same_column_flags():
    for command, parser in _command_parsers().items():
        flags = {a.dest: a for a in parser._actions}
        assert (flags["id_col"].default, flags["id_col"].help) == ("id", ID_HELP), command
        assert flags["emb_col"].default == "emb", command
        if command != "mass extract":  # extract names the column it writes
            assert flags["emb_col"].help == EMB_HELP, command
