"""verify_version_dir, each refusal on its own fresh export (fast, no server): the checks of a
signed export that the served-model tests reach only together. Kills the mutants
signature-* (tests/mutation/mutants.py); the last case is a folder the owner signed over
inconsistent files (export.json's weights sha256 is checked even under a valid signature)."""

from __future__ import annotations

import json

import pytest

from mass.errors import ChecksumMismatchError
from mass.keys import OwnerKey
from mass.serving.contract import SHA256SUMS
from mass.serving.export import export_modifier
from mass.serving.manifest import (
    manifest_names,
    sign_version_dir,
    signing_key,
    verify_version_dir,
    write_sha256sums,
)
from tests.mass.serving.test_export import make_run


@pytest.fixture()
def vdir(tmp_path):
    res = export_modifier(make_run(tmp_path), tmp_path / "repo", "mod")
    verify_version_dir(res.version_dir)  # sound before each tamper
    return res.version_dir


def _refused(vdir, match: str) -> None:
    with pytest.raises(ChecksumMismatchError, match=match):
        verify_version_dir(vdir)


def test_a_file_the_manifest_does_not_list_is_refused(vdir):
    (vdir / "shim.py").write_text("import os\n")
    _refused(vdir, "shim.py not listed")


def test_a_listed_file_edited_after_export_is_refused(vdir):
    config = vdir.parent / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited\n")
    _refused(vdir, "config.pbtxt: content differs")


def test_a_manifest_rehashed_without_the_key_is_refused(vdir):
    (vdir / "shim.py").write_text("import os\n")
    write_sha256sums(vdir, manifest_names(vdir))  # the old signature stays
    assert "shim.py" in (vdir / SHA256SUMS).read_text()
    _refused(vdir, "signature does not match")


def test_an_export_signed_with_another_key_is_refused(vdir):
    sign_version_dir(vdir, OwnerKey.generate())
    _refused(vdir, "signed with another key")


def test_a_signed_folder_moved_to_another_version_is_refused(vdir):
    moved = vdir.parent / "7"
    vdir.rename(moved)
    _refused(moved, "signature does not match")


def test_weights_that_differ_from_export_json_are_refused_even_when_signed(vdir):
    meta = json.loads((vdir / "export.json").read_text())
    meta["sha256"] = "0" * 64
    (vdir / "export.json").write_text(json.dumps(meta))
    sign_version_dir(vdir, signing_key())  # the owner signed an inconsistent folder
    _refused(vdir, "recorded in export.json")


def test_the_gpu_config_variant_is_signed_and_checked(tmp_path):
    """configs/gpu.pbtxt (``--gpu-variant``) is served with --model-config-name=gpu: the signed
    manifest lists it, so an edit is refused (kills signature-gpu-config-unlisted)."""
    res = export_modifier(make_run(tmp_path), tmp_path / "repo", "mod", gpu_variant=True)
    vdir = res.version_dir
    gpu = vdir.parent / "configs" / "gpu.pbtxt"
    assert gpu.is_file() and "../configs/gpu.pbtxt" in manifest_names(vdir)
    listed = (vdir / SHA256SUMS).read_text()
    assert "../configs/gpu.pbtxt" in listed
    verify_version_dir(vdir)
    gpu.write_text(gpu.read_text().replace("KIND_GPU", "KIND_CPU") + "\n# edited\n")
    _refused(vdir, "gpu.pbtxt")
