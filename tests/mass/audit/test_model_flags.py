"""`mass audit`'s --repository / --model-version / --signing-key-file belong to --model (the
signed export that recomputes the near rows): alone they would do nothing, so they are
refused by name instead of ignored."""

from __future__ import annotations

import pytest

from mass.cli import parse_command
from mass.commands.audit import _near
from mass.errors import ConfigError


@pytest.mark.parametrize("flags, named", [
    (["--repository", "repo"], "--repository"),
    (["--model-version", "2", "--signing-key-file", "k"], "--model-version, --signing-key-file"),
])  # fmt: skip
def test_the_model_flags_without_model_are_refused_by_name(flags, named):
    args, _ = parse_command(["audit", "--release", "r", "--labels", "l", "--suppress", "s",
                             "--report", "out", *flags])  # fmt: skip
    with pytest.raises(ConfigError, match=f"^{named}: only with --model"):
        _near(args)


def test_without_any_model_flag_nothing_is_recomputed():
    args, _ = parse_command(["audit", "--release", "r", "--labels", "l", "--suppress", "s",
                             "--report", "out"])  # fmt: skip
    assert _near(args) is None
