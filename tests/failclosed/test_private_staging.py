"""Issue 23 item 7: the job's staging beside --output (spills with each row's input
embedding, the staged release, the audit's filtered labels) is private while the job runs, and
a published release is not left private."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

from beam_pipelines.plan import Staging
from mass.release.commit import private_dir, swap_into_place


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_staging_directories_are_created_0700_before_anything_is_written(tmp_path):
    job = SimpleNamespace(output=str(tmp_path / "release"), quarantine=str(tmp_path / "q"),
                          temp_location=None)  # fmt: skip
    old = os.umask(0o022)
    try:
        staging = Staging.of(job)
        staging.create_private()
    finally:
        os.umask(old)
    made = [staging.stage, staging.q_stage, staging.spills]
    assert all(_mode(d) == 0o700 for d in made)
    assert not os.path.exists(staging.aux)  # made (private) only where it is first needed
    private_dir(staging.aux)
    assert _mode(staging.aux) == 0o700


def test_a_published_release_gets_the_umask_mode_not_0700(tmp_path):
    staged = tmp_path / "release.tmp-1-abc"
    staged.mkdir(mode=0o700)
    (staged / "part-0.parquet").write_bytes(b"x")
    old = os.umask(0o027)
    try:
        swap_into_place(str(staged), str(tmp_path / "release"))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "release") == 0o750
