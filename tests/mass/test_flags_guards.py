"""The flag contract (mass/flags.py, issue 37): ANY leftover token is refused before any work,
a short flag (``-x``) as well as a long one, not only tokens starting with ``--``."""

from __future__ import annotations

import pytest

from mass.cli import main


@pytest.mark.parametrize("extra", ["-x", "--x", "stray"])
def test_keygen_with_a_leftover_token_is_refused_and_writes_nothing(tmp_path, capsys, extra):
    path = tmp_path / "k"
    assert main(["keygen", str(path), extra]) == 2
    err = capsys.readouterr().err
    assert "UnknownFlagError" in err and repr(extra)[1:-1] in err and "nothing was run" in err
    assert not path.exists()
