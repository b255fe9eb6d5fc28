"""The signed newest-version record binds the model it was written for (mass/serving/newest.py,
issue 37): another model's record copied over this one's is refused, never read as this
model's, so it cannot make an older version of this model pass as the newest.

Written against the documented behaviour through the public functions only (the record's
format may change; what it binds may not)."""

from __future__ import annotations

import shutil

import pytest

from mass.errors import ChecksumMismatchError
from mass.keys import OwnerKey
from mass.serving.newest import NEWEST, check_not_rolled_back, record_newest

KEY = OwnerKey(bytes(range(1, 33)), "<test>")
SHA = "ab" * 32


def test_another_models_record_copied_over_this_ones_is_refused(tmp_path):
    mine, other = tmp_path / "digits", tmp_path / "faces"
    mine.mkdir()
    other.mkdir()
    record_newest(mine, 3, SHA, KEY)  # this model's newest export: version 3
    record_newest(other, 2, SHA, KEY)  # another model's, signed by the same owner
    meta = {"newest_record": NEWEST}
    with pytest.raises(Exception, match="version 3"):  # v3 removed: v2 is refused as newest
        check_not_rolled_back(mine, 2, meta, KEY)
    shutil.copy(other / NEWEST, mine / NEWEST)  # ... and the other model's record copied in
    with pytest.raises(ChecksumMismatchError, match=NEWEST):
        check_not_rolled_back(mine, 2, meta, KEY)
    check_not_rolled_back(other, 2, meta, KEY)  # the record is good where it was written
