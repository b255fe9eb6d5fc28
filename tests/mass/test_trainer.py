"""Trainer of G: frozen branches get no gradient, determinism, checkpoint/resume, adaptive."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mass.config import MassConfig
from mass.methods import get_method
from mass.methods.mass import fit_mass, normalize_rows, pretrain_branches
from mass.noise import row_seeds
from mass.synthetic import make_synthetic
from mass.trainer import ModifierTrainer

BASE = {
    "suppress": "s",
    "preserve": "u",
    "epochs": 2,
    "branch_epochs": 2,
    "agnostic_epochs": 2,
    "batch_size": 32,
    "hidden": [16, 16],
}


@pytest.fixture(scope="module")
def data():
    return make_synthetic(n=128, dim=8, s_classes=3, seed=0)


@pytest.fixture(scope="module")
def branches(data):
    cfg = MassConfig.from_dict(BASE)
    x = normalize_rows(data.x)
    return pretrain_branches(x, data.labels, {"s": 3, "u": 2}, cfg)


def _snapshot(branches):
    return [p.detach().clone() for p in branches.parameters()]


@pytest.mark.parametrize("mode", ["faithful", "adaptive"])
def test_frozen_branches_get_no_grad_and_stay_unchanged(data, branches, mode):
    before = _snapshot(branches)
    cfg = MassConfig.from_dict({**BASE, "mode": mode, "sim_s": "kl"})
    t = ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2})
    hist = t.fit(normalize_rows(data.x), data.labels, progress=False)
    assert len(hist) == 2 and np.isfinite(hist[-1]["loss"])
    for p, q in zip(branches.parameters(), before, strict=True):
        assert p.grad is None and not p.requires_grad
        assert torch.equal(p, q)
    if mode == "adaptive":
        assert {"adv", "match", "adv_ce"} <= set(hist[-1])
        assert t.modifier.stochastic


def test_gradient_reaches_modifier_through_every_term(data, branches):
    cfg = MassConfig.from_dict({**BASE, "mode": "adaptive", "sim_s": "ce"})
    t = ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2})
    t.priors = {"s": torch.full((3,), 1 / 3)}
    x = torch.as_tensor(normalize_rows(data.x[:32]))
    y = {a: torch.as_tensor(v[:32]) for a, v in data.labels.items()}
    x_mod = t.modifier(x, torch.arange(32))
    terms = t.loss_terms(x, x_mod, y)
    assert {"rec", "s:s", "r*", "r:u", "adv", "match"} <= set(terms), sorted(terms)
    for name, term in terms.items():
        t.modifier.zero_grad()
        term.backward(retain_graph=True)
        g = sum(p.grad.abs().sum() for p in t.modifier.parameters() if p.grad is not None)
        assert g > 0, name


def test_training_is_deterministic_given_seed(data, branches):
    cfg = MassConfig.from_dict({**BASE, "mode": "adaptive"})
    outs = []
    for _ in range(2):
        res = fit_mass(data, cfg, branches=branches, progress=False)
        with torch.no_grad():
            outs.append(res.modifier(torch.as_tensor(data.x), torch.arange(128)).numpy())
    assert np.array_equal(outs[0], outs[1])


def test_resume_continues_to_the_same_weights(tmp_path, data, branches):
    cfg = MassConfig.from_dict({**BASE, "epochs": 3, "mode": "adaptive"})
    full = fit_mass(data, cfg, branches=branches, run_dir=str(tmp_path / "a"), progress=False)
    run_b = tmp_path / "b"
    run_b.mkdir()
    interrupted = ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2})
    interrupted.fit(
        normalize_rows(data.x),
        data.labels,
        seeds=row_seeds(data.ids),
        checkpoint=str(run_b / "checkpoint.pt"),
        progress=False,
        stop_after=1,
    )
    resumed = fit_mass(
        data, cfg, branches=branches, run_dir=str(run_b), resume=True, progress=False
    )
    assert [h["epoch"] for h in resumed.history] == [0, 1, 2]
    for p, q in zip(full.modifier.parameters(), resumed.modifier.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_resume_refuses_checkpoint_of_another_config(tmp_path, data, branches):
    from mass.errors import ConfigError

    cfg = MassConfig.from_dict(BASE)
    fit_mass(data, cfg, branches=branches, run_dir=str(tmp_path), progress=False)
    with pytest.raises(ConfigError, match="another config"):
        fit_mass(
            data,
            cfg.with_(lr=0.01),
            branches=branches,
            run_dir=str(tmp_path),
            resume=True,
            progress=False,
        )


def test_registered_method_fits_with_agnostic_only(data):
    res = get_method("mass").fit(
        data,
        suppress=["s"],
        preserve=[],
        params={k: v for k, v in BASE.items() if k not in ("suppress", "preserve")},
        progress=False,
    )
    assert set(res.branches) == {"s", "agnostic"} and len(res.history) == 2
    out = res.modifier(torch.as_tensor(data.x[:4]))
    assert torch.allclose(out.norm(dim=1), torch.ones(4), atol=1e-5)


def test_suppression_lowers_frozen_accuracy_on_synthetic():
    ds = make_synthetic(n=512, dim=8, seed=1, noise=0.2)
    cfg = MassConfig.from_dict(
        {
            "suppress": "s",
            "epochs": 15,
            "branch_epochs": 5,
            "agnostic_epochs": 2,
            "w_rstar": 0.0,
            "lr": 0.003,
        }
    )
    res = fit_mass(ds, cfg, progress=False)
    x = torch.as_tensor(normalize_rows(ds.x))
    clf = res.branches["s"]
    with torch.no_grad():
        acc_x = (clf(x)[1].argmax(1).numpy() == ds.labels["s"]).mean()
        acc_xm = (clf(res.modifier(x))[1].argmax(1).numpy() == ds.labels["s"]).mean()
    assert acc_x > 0.9 and acc_xm < 0.75


def test_branch_left_in_train_mode_is_still_frozen_including_batchnorm_stats(data, branches):
    from mass.branch_models import LogitsOnly
    from mass.metrics import frozen_accuracy

    clf = branches.classifiers["s"]
    frozen_accuracy(LogitsOnly(clf), normalize_rows(data.x), data.labels["s"])
    assert not clf.training  # the metric's "restore training mode" must not unfreeze it
    clf.train()  # even a caller that does this cannot make G's training move BN statistics
    buffers = [b.clone() for b in clf.buffers()]
    cfg = MassConfig.from_dict(BASE)
    ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2}).fit(
        normalize_rows(data.x), data.labels, progress=False
    )
    assert all(torch.equal(a, b) for a, b in zip(clf.buffers(), buffers, strict=True))


def test_utility_learners_train_online_and_never_touch_frozen_branches(data, branches):
    before = _snapshot(branches)
    cfg = MassConfig.from_dict(
        {**BASE, "mode": "adaptive", "adaptive": {"utility_weight": 5.0, "output_noise": 0.1}}
    )
    t = ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2})
    assert t.utility is not None and list(t.utility.models) == ["u__mlp"]
    hist = t.fit(normalize_rows(data.x), data.labels, seeds=np.arange(128), progress=False)
    assert {"util", "util_ce"} <= set(hist[-1]) and np.isfinite(hist[-1]["util"])
    assert t.modifier.spec.output_noise == 0.1
    for p, q in zip(branches.parameters(), before, strict=True):
        assert torch.equal(p, q)
    # the utility learners do learn: their CE falls below chance (log 2) on the training rows
    assert hist[-1]["util_ce"] < np.log(2)


def test_progress_off_a_terminal_is_log_lines_not_bar_redraws(data, branches, caplog, capfd):
    """A cron log (stderr not a TTY) gets `train G: step k/N ... rows/s` lines, no \\r."""
    import logging

    cfg = MassConfig.from_dict(BASE)
    t = ModifierTrainer(cfg, branches, dim=8, num_classes={"s": 3, "u": 2})
    with caplog.at_level(logging.INFO, logger="mass.progress"):
        t.fit(normalize_rows(data.x), data.labels, progress=True)
    err = capfd.readouterr().err
    assert "\r" not in err
    lines = [r.getMessage() for r in caplog.records if r.name == "mass.progress"]
    assert lines and lines[-1].startswith("train G: step 8/8 (100%)") and "rows/s" in lines[-1]


def test_progress_is_a_bar_only_on_a_terminal():
    import io

    from mass.progress import LogProgress, progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress(5, desc="d", enabled=False) is None
    assert isinstance(progress(5, desc="d", stream=io.StringIO()), LogProgress)
    bar = progress(5, desc="d", stream=Tty())
    assert not isinstance(bar, LogProgress) and hasattr(bar, "update")
    bar.close()
