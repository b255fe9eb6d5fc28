"""Which directories the job counts as its own: the marker file must carry our format tag, not
merely exist under our name. Kills the mutant ownership-any-json-marker."""

from __future__ import annotations

import json

import pytest

from mass.errors import OutputPathError
from transforms import publish
from transforms import release as R


@pytest.mark.parametrize("doc", [{}, {"format": "notes/1"}, {"format": R.QUARANTINE_FORMAT}],
                         ids=["empty", "other-format", "quarantine-format"])  # fmt: skip
def test_a_release_marker_without_our_format_does_not_make_a_directory_ours(tmp_path, doc):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / R.RELEASE_MARKER).write_text(json.dumps(doc))
    (out / "notes.txt").write_text("the user's")
    assert not publish.holds_marker(str(out), R.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match="without the _release.json marker"):
        publish.check_replaceable("--output", str(out), R.RELEASE_MARKER)
    (out / R.RELEASE_MARKER).write_text(json.dumps({"format": R.RELEASE_FORMAT}))
    assert publish.holds_marker(str(out), R.RELEASE_MARKER)
    publish.check_replaceable("--output", str(out), R.RELEASE_MARKER)  # ours: may be replaced
