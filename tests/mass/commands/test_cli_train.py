"""`mass train` end to end on small synthetic Parquet: run directory contract and errors."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from mass.cli import main
from mass.modifiers import load_modifier, modifier_meta
from mass.synthetic import write_synthetic

FAST = {
    "train": {
        "epochs": 2,
        "branch_epochs": 1,
        "agnostic_epochs": 1,
        "batch_size": 32,
        "modifier": {"hidden": [16]},
        "suppress": ["s"],
    }
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    write_synthetic(str(d / "train.parquet"), n=96, dim=8, seed=0)
    write_synthetic(str(d / "val.parquet"), n=48, dim=8, seed=0)
    (d / "params.yaml").write_text(yaml.safe_dump(FAST))
    return d


def test_train_writes_the_run_directory_contract(files, tmp_path):
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--data",
            str(files / "train.parquet"),
            "--val",
            str(files / "val.parquet"),
            "--id-col",
            "id",
            "--emb-col",
            "emb",
            "--preserve",
            "u",
            "--method",
            "mass",
            "--config",
            str(files / "params.yaml"),
            "--out",
            str(out),
            "--no-progress",
            "--attackers",
            "logreg",
        ]
    )
    assert rc == 0
    for name in ("modifier.pt", "branches.pt", "config.yaml", "encodings.json", "metrics.json"):
        assert (out / name).exists(), name
    meta = modifier_meta(str(out / "modifier.pt"))
    assert meta["method"] == "mass" and meta["suppress"] == ["s"] and meta["preserve"] == ["u"]
    assert meta["dim"] == 8 and len(meta["config_hash"]) == 64
    assert meta["encodings"] == {"s": [0, 1], "u": [0, 1]}
    cfg = yaml.safe_load((out / "config.yaml").read_text())["train"]
    assert cfg["epochs"] == 2 and cfg["suppress"] == ["s"] and cfg["preserve"] == ["u"]
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["epoch_seconds"]) == 2 and m["train_seconds"] > 0
    row = m["val"]["s"]
    assert {"majority", "frozen_x", "frozen_xmod", "retrained_x", "retrained_xmod"} <= set(row)
    assert set(row["retrained_xmod"]) == {"logreg"}
    g = load_modifier(str(out / "modifier.pt"))
    assert g(torch.zeros(2, 8)).shape == (2, 8)


def test_resume_after_finished_run_keeps_history(files, tmp_path):
    out = tmp_path / "run"
    args = [
        "train",
        "--data",
        str(files / "train.parquet"),
        "--suppress",
        "s",
        "--config",
        str(files / "params.yaml"),
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    assert main([*args, "--resume"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert [h["epoch"] for h in m["history"]] == [0, 1]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--suppress", "age"], "'age' is not a label column"),
        (["--suppress", "s", "--preserve", "s"], "appear in both"),
        (["--suppress", "s", "--method", "nope"], "unknown method"),
    ],
)
def test_bad_attributes_exit_2_naming_the_parameter(files, tmp_path, capsys, extra, needle):
    rc = main(
        [
            "train",
            "--data",
            str(files / "train.parquet"),
            "--out",
            str(tmp_path / "r"),
            "--config",
            str(files / "params.yaml"),
            "--no-progress",
            *extra,
        ]
    )
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_missing_data_file_is_reported(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--data",
            str(tmp_path / "nope.parquet"),
            "--suppress",
            "s",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2 and "nope.parquet" in capsys.readouterr().err


def test_help_lists_methods_and_modes_and_every_flag_has_help(capsys):
    import argparse

    from mass.commands import train as cmd
    from mass.config import METHOD_NAMES, MODES

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    for action in p._actions:
        assert action.help, f"{action.option_strings} has no help line"
    text = p.format_help()
    for name in (*METHOD_NAMES, *MODES):
        assert name in text, name


def test_a_method_without_judges_of_its_own_still_writes_frozen_judges(files, tmp_path):
    """An eraser (LEACE) trains no branch models; the run still carries the paper's frozen
    judges (one classifier per named attribute on the original rows), so the audit reports
    frozen numbers beside the retrained attackers for every release."""
    from mass.branch_models import load_branches
    from mass.io import load_embeddings

    out = tmp_path / "leace"
    rc = main(["train", "--data", str(files / "train.parquet"), "--suppress", "s",
               "--preserve", "u", "--method", "leace", "--out", str(out), "--no-progress"])  # fmt: skip
    assert rc == 0
    classifiers, agnostic = load_branches(str(out / "branches.pt"))
    assert sorted(classifiers) == ["s", "u"] and agnostic is None
    ds = load_embeddings(str(files / "train.parquet"), label_cols=["s"])
    x = torch.nn.functional.normalize(torch.as_tensor(ds.x, dtype=torch.float32), dim=1)
    with torch.no_grad():
        pred = classifiers["s"](x)[1].argmax(1).numpy()
    # trained on the original rows: it reads s there well above the majority rate
    assert (pred == ds.labels["s"]).mean() > max(
        ds.labels["s"].mean(), 1 - ds.labels["s"].mean()
    ) + 0.1


def test_frozen_judges_train_on_a_seeded_subsample_of_large_inputs(files, monkeypatch):
    """Above ATTACKER_ROWS the frozen judges fit on a seeded subsample (10 epochs x 2 judges on
    a 200k-row sample cost ~1,000 CPU-s otherwise); below it, on every row."""
    import mass.methods.mass as mm
    import mass.training as T
    from mass.io import load_embeddings

    seen = []
    real = mm.pretrain_branches

    def spy(x, labels, *a, **kw):
        seen.append((len(x), {k: len(v) for k, v in labels.items()}))
        return real(x, labels, *a, **kw)

    monkeypatch.setattr(mm, "pretrain_branches", spy)
    ds = load_embeddings(str(files / "train.parquet"), label_cols=["s", "u"])
    T.frozen_judges(ds, ["s", "u"], epochs=1)
    monkeypatch.setattr(T, "ATTACKER_ROWS", 50)
    a = T.frozen_judges(ds, ["s", "u"], epochs=1, seed=3)
    assert seen[0][0] == len(ds) > 50 and seen[1] == (50, {"s": 50, "u": 50})
    assert sorted(a) == ["s", "u"]
