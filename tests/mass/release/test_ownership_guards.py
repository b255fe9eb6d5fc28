"""Which directories the job counts as its own: the marker file must carry our format tag, not
merely exist under our name. Kills the mutant ownership-any-json-marker."""

from __future__ import annotations

import json

import pytest

from mass import formats as release_format
from mass.errors import OutputPathError
from mass.release import ownership


@pytest.mark.parametrize("doc", [{}, {"format": "notes/1"}, {"format": release_format.QUARANTINE_FORMAT}],
                         ids=["empty", "other-format", "quarantine-format"])  # fmt: skip
def test_a_release_marker_without_our_format_does_not_make_a_directory_ours(tmp_path, doc):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / release_format.RELEASE_MARKER).write_text(json.dumps(doc))
    (out / "notes.txt").write_text("the user's")
    assert not release_format.holds_marker(str(out), release_format.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match="without the _release.json marker"):
        ownership.check_replaceable("--output", str(out), release_format.RELEASE_MARKER)
    (out / release_format.RELEASE_MARKER).write_text(
        json.dumps({"format": release_format.RELEASE_FORMAT})
    )
    assert release_format.holds_marker(str(out), release_format.RELEASE_MARKER)
    ownership.check_replaceable(
        "--output", str(out), release_format.RELEASE_MARKER
    )  # ours: may be replaced


def test_a_symlinked_release_marker_does_not_make_a_directory_ours(tmp_path):
    """A user's folder whose _release.json is a link (to a genuine marker of ours elsewhere)
    is the user's: the job never replaces it. Kills ownership-symlinked-marker."""
    ours = tmp_path / "old-release"
    ours.mkdir()
    (ours / release_format.RELEASE_MARKER).write_text(
        json.dumps({"format": release_format.RELEASE_FORMAT})
    )
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    (out / release_format.RELEASE_MARKER).symlink_to(ours / release_format.RELEASE_MARKER)
    assert release_format.holds_marker(str(ours), release_format.RELEASE_MARKER)
    assert not release_format.holds_marker(str(out), release_format.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match="without the _release.json marker"):
        ownership.check_replaceable("--output", str(out), release_format.RELEASE_MARKER)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from mass.testing.services import moto_s3

    with moto_s3(str(tmp_path_factory.mktemp("moto")), "own") as env:
        yield env


@pytest.mark.parametrize("doc", [{}, {"format": "notes/1"}, {"format": release_format.QUARANTINE_FORMAT}],
                         ids=["empty", "other-format", "quarantine-format"])  # fmt: skip
def test_an_object_store_marker_must_be_ours_not_merely_exist(s3, doc):
    """On an object store too, a `_release.json` object is ours only with our format tag.
    Kills ownership-remote-marker-exists."""
    from mass import fs

    out = f"s3://own/{doc.get('format', 'empty').replace('/', '-')}"
    fs.write_bytes(f"{out}/notes.txt", b"the user's")
    fs.write_bytes(f"{out}/{release_format.RELEASE_MARKER}", json.dumps(doc).encode())
    assert not release_format.holds_marker(out, release_format.RELEASE_MARKER)
    with pytest.raises(OutputPathError, match=f"no {release_format.RELEASE_MARKER} pointer"):
        ownership.check_replaceable("--output", out, release_format.RELEASE_MARKER)
    fs.write_bytes(
        f"{out}/{release_format.RELEASE_MARKER}",
        json.dumps({"format": release_format.RELEASE_FORMAT}).encode(),
    )
    assert release_format.holds_marker(out, release_format.RELEASE_MARKER)
    ownership.check_replaceable(
        "--output", out, release_format.RELEASE_MARKER
    )  # ours: may be replaced
