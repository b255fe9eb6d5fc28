"""Part 4, training: ``ModifierTrainer`` epoch time vs a bare PyTorch loop (the training limit)."""

from __future__ import annotations

import time

from bench.measure import TreeRss


def _train_setup(rows: int, dim: int, seed: int):
    import torch

    from mass.branch_models import AgnosticModel, AttributeClassifier, freeze
    from mass.synthetic import make_synthetic
    from mass.trainer import Branches

    ds = make_synthetic(rows, dim, s_classes=2, u_classes=3, rho=0.5, seed=seed)
    torch.manual_seed(seed)
    # G's epoch does not depend on how well the frozen branches were trained: random ones.
    branches = Branches(
        {"s": freeze(AttributeClassifier(dim, 2)), "u": freeze(AttributeClassifier(dim, 3))},
        freeze(AgnosticModel(dim)),
    )
    return ds, branches


def bare_epoch(x, ys, branches, modifier, opt, *, batch_size: int, seed: int) -> float:
    """One epoch of eq. 9 (faithful MaSS, default weights) with nothing but PyTorch; seconds."""
    import torch

    from mass import losses

    s_model, u_model, agn = branches.classifiers["s"], branches.classifiers["u"], branches.agnostic
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    modifier.train()
    for i in range(max(1, len(x) // batch_size)):
        idx = perm[i * batch_size : (i + 1) * batch_size]
        xb, y_s, y_u = x[idx], ys["s"][idx], ys["u"][idx]
        x_mod = modifier(xb)
        with torch.no_grad():
            z_s, _ = s_model(xb)
            _, p_u = u_model(xb)
            _, p_a = agn(xb)
        z_ms, p_ms = s_model(x_mod)
        loss = (
            losses.reconstruction_loss(x_mod, xb, w_rec=1.0)
            + losses.suppression_loss(losses.cos_sim(z_ms, z_s), p_ms, w_s=5.0, h_s=1.0)
            + losses.agnostic_preservation_loss(p_a, agn(x_mod)[1], w_rstar=40.0, tau=0.07)
            + losses.preservation_loss(losses.kl_sim(u_model(x_mod)[1], p_u), w_r=1.0)
        )
        del y_s, y_u
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def run_training(rows: int, dim: int, *, epochs: int, threads: int, seed: int) -> dict:
    import torch

    from mass.config import MassConfig
    from mass.modifiers import DataModifier
    from mass.noise import row_seeds
    from mass.trainer import ModifierTrainer

    torch.set_num_threads(threads)
    ds, branches = _train_setup(rows, dim, seed)
    cfg = MassConfig(suppress=("s",), preserve=("u",), epochs=epochs, seed=seed)
    rec: dict = {"rows": rows, "dim": dim, "epochs": epochs, "batch_size": cfg.batch_size}
    with TreeRss() as rss:
        trainer = ModifierTrainer(cfg, branches, dim=dim, num_classes={"s": 2, "u": 3})
        hist = trainer.fit(ds.x, ds.labels, seeds=row_seeds(ds.ids), progress=False)
    rec["trainer_epoch_s"] = [round(h["seconds"], 3) for h in hist]
    rec["trainer_peak_rss_mb"] = rss.as_dict()["peak_rss_mb"]
    x = torch.as_tensor(ds.x)
    ys = {k: torch.as_tensor(v) for k, v in ds.labels.items()}
    torch.manual_seed(seed)
    modifier = DataModifier(trainer.spec)
    opt = torch.optim.AdamW(modifier.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    with TreeRss() as rss:
        bare = [
            bare_epoch(
                x, ys, branches, modifier, opt, batch_size=cfg.batch_size, seed=seed * 1000 + e
            )
            for e in range(epochs)
        ]
    rec["bare_epoch_s"] = [round(b, 3) for b in bare]
    rec["bare_peak_rss_mb"] = rss.as_dict()["peak_rss_mb"]
    # the first epoch pays one-off allocations in both loops: compare the best epochs
    rec["train_over_limit"] = round(min(bare) / min(h["seconds"] for h in hist), 3)
    return rec
