"""The staged copy is verified AFTER copying (mass/serving/staging.py, issue 37): a file that
changes between the check of the user's folder and the copy (a race, or a copy that went
wrong) is refused before any server loads it, not served because the source verified."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mass.errors import ChecksumMismatchError
from mass.serving import staging
from mass.serving.export import export_modifier
from mass.serving.manifest import signing_key
from tests.mass.serving.test_export import make_run


def test_a_copy_that_differs_from_the_verified_source_is_refused(tmp_path, monkeypatch):
    res = export_modifier(make_run(tmp_path), tmp_path / "repo", "mod")
    key = signing_key(None)
    real, changed = shutil.copytree, []

    def copy_then_change(src, dst, *a, **kw):
        out = real(src, dst, *a, **kw)
        for f in sorted(Path(dst).rglob("*.pt")):  # the weights, as copied
            f.write_bytes(f.read_bytes() + b"\0")
            changed.append(f.name)
        return out

    staging.stage_models(tmp_path / "repo", tmp_path / "ok", {"mod": None}, key)  # sound
    monkeypatch.setattr(staging.shutil, "copytree", copy_then_change)
    with pytest.raises(ChecksumMismatchError):
        staging.stage_models(tmp_path / "repo", tmp_path / "staged", {"mod": None}, key)
    assert changed  # the weights were changed in the copy only
    assert res.version_dir.exists()


def test_a_version_the_model_folder_lacks_is_named_with_those_it_has(tmp_path):
    """`--model-version 7` where only 1 and 2 exist: the message lists them (before: "…/7/
    export.json: missing; re-export", as if the export had been damaged)."""
    from mass.errors import ServingError
    from mass.serving.contract import export_info

    for v in (1, 2):
        (tmp_path / "m" / str(v)).mkdir(parents=True)
        (tmp_path / "m" / str(v) / "export.json").write_text("{}")
    assert export_info(str(tmp_path), "m")["version"] == 2
    with pytest.raises(ServingError, match=r"no version 7 \(versions there: \[1, 2\]\)"):
        export_info(str(tmp_path), "m", "7")
