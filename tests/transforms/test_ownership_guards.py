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


def test_a_symlinked_release_marker_does_not_make_a_directory_ours(tmp_path):
    """A user's folder whose _release.json is a link (to a genuine marker of ours elsewhere)
    is the user's: the job never replaces it. Kills ownership-symlinked-marker."""
    ours = tmp_path / "old-release"
    ours.mkdir()
    (ours / R.RELEASE_MARKER).write_text(json.dumps({"format": R.RELEASE_FORMAT}))
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    (out / R.RELEASE_MARKER).symlink_to(ours / R.RELEASE_MARKER)
    assert publish.holds_marker(str(ours), R.RELEASE_MARKER)
    assert not publish.holds_marker(str(out), R.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match="without the _release.json marker"):
        publish.check_replaceable("--output", str(out), R.RELEASE_MARKER)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from transforms.services import moto_s3

    with moto_s3(str(tmp_path_factory.mktemp("moto")), "own") as env:
        yield env


@pytest.mark.parametrize("doc", [{}, {"format": "notes/1"}, {"format": R.QUARANTINE_FORMAT}],
                         ids=["empty", "other-format", "quarantine-format"])  # fmt: skip
def test_an_object_store_marker_must_be_ours_not_merely_exist(s3, doc):
    """On an object store too, a `_release.json` object is ours only with our format tag.
    Kills ownership-remote-marker-exists."""
    from mass import fs

    out = f"s3://own/{doc.get('format', 'empty').replace('/', '-')}"
    fs.write_bytes(f"{out}/notes.txt", b"the user's")
    fs.write_bytes(f"{out}/{R.RELEASE_MARKER}", json.dumps(doc).encode())
    assert not publish.holds_marker(out, R.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match=f"no {R.RELEASE_MARKER} pointer"):
        publish.check_replaceable("--output", out, R.RELEASE_MARKER)
    fs.write_bytes(f"{out}/{R.RELEASE_MARKER}", json.dumps({"format": R.RELEASE_FORMAT}).encode())
    assert publish.holds_marker(out, R.RELEASE_MARKER)
    publish.check_replaceable("--output", out, R.RELEASE_MARKER)  # ours: may be replaced
