"""Method "mass": MaSS (faithful, the paper) and its adaptive mode, behind the Method protocol."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import torch

from mass.branch_models import load_branches, save_branches
from mass.branches import train_agnostic, train_classifier
from mass.config import MassConfig
from mass.io import EmbeddingDataset
from mass.methods import FitResult, Method, register_method
from mass.modifiers import ChainModifier
from mass.noise import row_seeds
from mass.rows import normalize_rows
from mass.trainer import Branches, ModifierTrainer

log = logging.getLogger(__name__)
__all__ = ["MassMethod", "fit_mass", "normalize_rows", "pre_erase", "pretrain_branches"]


def pretrain_branches(
    x: np.ndarray,
    labels: dict[str, np.ndarray],
    num_classes: dict[str, int],
    cfg: MassConfig,
    *,
    attributes: tuple[str, ...] | None = None,
    agnostic: bool | None = None,
    views: tuple[np.ndarray, np.ndarray] | None = None,
) -> Branches:
    """Classifiers for S (and R where w^r > 0) and, when w^{r*} > 0, the agnostic model."""
    if attributes is None:
        attributes = cfg.suppress + tuple(r for r in cfg.preserve if cfg.weight_r(r) > 0)
    classifiers = {}
    for i, a in enumerate(attributes):
        t0 = time.perf_counter()
        classifiers[a] = train_classifier(
            x, labels[a], num_classes[a], epochs=cfg.branch_epochs, seed=cfg.seed + 17 * i
        )
        log.info("branch %s trained in %.1fs", a, time.perf_counter() - t0)
    agn = None
    if agnostic if agnostic is not None else cfg.w_rstar > 0:
        t0 = time.perf_counter()
        agn = train_agnostic(
            x, views=views, epochs=cfg.agnostic_epochs, tau=cfg.tau, seed=cfg.seed,
            noise_std=cfg.aug_noise_std, drop_prob=cfg.aug_drop_prob,
        )  # fmt: skip
        log.info("agnostic model trained in %.1fs", time.perf_counter() - t0)
    return Branches(classifiers, agn)


def fit_mass(
    train: EmbeddingDataset,
    cfg: MassConfig,
    *,
    branches: Branches | None = None,
    run_dir: str | None = None,
    resume: bool = False,
    progress: bool = True,
    views: tuple[np.ndarray, np.ndarray] | None = None,
) -> FitResult:
    """Pretrain (or reuse / resume) the branches, then train G; deterministic given cfg.seed."""
    cfg.validate(train.labels, source=train.source or "training data")
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except Exception:  # some builds refuse; determinism on CPU holds without it
        pass
    t0 = time.perf_counter()
    if run_dir:
        os.makedirs(run_dir, exist_ok=True)
    eraser = None
    if cfg.adaptive_on and cfg.adaptive.pre_erase != "none":
        eraser, train = pre_erase(train, cfg)
        branches = None  # G's frozen branches must see what G sees: the erased rows
    x = normalize_rows(train.x)
    num_classes = {a: train.num_classes(a) for a in train.labels}
    bpath = os.path.join(run_dir, "branches.pt") if run_dir else None
    if branches is None and resume and bpath and os.path.exists(bpath):
        cls, agn = load_branches(bpath)
        branches = Branches(cls, agn)
    if branches is None:
        branches = pretrain_branches(x, train.labels, num_classes, cfg, views=views)
    if bpath:
        save_branches(bpath, branches.classifiers, branches.agnostic)
    t_branches = time.perf_counter() - t0
    trainer = ModifierTrainer(cfg, branches, dim=x.shape[1], num_classes=num_classes)
    # Public row_seeds at training time: G learns to work under noise of this distribution;
    # the release draws the same distribution from keyed seeds (mass.noise.keyed_row_seeds).
    history = trainer.fit(
        x, train.labels, seeds=row_seeds(train.ids),
        checkpoint=os.path.join(run_dir, "checkpoint.pt") if run_dir else None,
        resume=resume, progress=progress,
    )  # fmt: skip
    modifier = trainer.modifier
    if eraser is not None:
        modifier = ChainModifier.of(eraser, trainer.modifier)
    return FitResult(
        modifier=modifier,
        branches={**branches.classifiers, **({"agnostic": branches.agnostic} if branches.agnostic else {})},
        history=history,
        seconds=time.perf_counter() - t0,
        extra={"branch_seconds": t_branches, "config": cfg.to_dict(),
               "config_hash": cfg.config_hash(), "branches_obj": branches},
    )  # fmt: skip


def pre_erase(train: EmbeddingDataset, cfg: MassConfig):
    """Fit the closed-form eraser of ``cfg.adaptive.pre_erase`` on S; return it and the
    training rows it outputs (what G is then trained on)."""
    import dataclasses

    from mass.methods import get_method

    name = {"leace": "leace", "quadratic": "leace_quadratic"}[cfg.adaptive.pre_erase]
    t0 = time.perf_counter()
    fit = get_method(name).fit(train, suppress=list(cfg.suppress), preserve=list(cfg.preserve),
                               params={}, seed=cfg.seed, progress=False)  # fmt: skip
    with torch.no_grad():
        xe = fit.modifier(torch.from_numpy(normalize_rows(train.x))).numpy()
    log.info("pre-erasure (%s) fitted in %.1fs", name, time.perf_counter() - t0)
    return fit.modifier.eval(), dataclasses.replace(train, x=xe)


@register_method("mass")
class MassMethod(Method):
    """MaSS (Chen et al., ICLR 2024), faithful or adaptive per ``mode``; the params dataclass
    is :class:`mass.config.MassConfig` (which also carries suppress/preserve)."""

    Params = MassConfig

    def parse(self, params: Any, *, suppress: list[str], preserve: list[str],
              seed: int | None = None) -> MassConfig:  # fmt: skip
        if isinstance(params, MassConfig):
            return params
        d = dict(params or {})
        if seed is not None:
            d.setdefault("seed", seed)
        return MassConfig.from_dict({**d, "method": "mass"}, suppress=list(suppress),
                                    preserve=list(preserve))  # fmt: skip

    def resolve(self, params: Any, *, suppress: list[str], preserve: list[str]) -> dict:
        return self.parse(params, suppress=suppress, preserve=preserve).to_dict()

    def fit_params(self, train, p: MassConfig, *, suppress, preserve, val, progress,
                   run_dir: str | None = None, resume: bool = False,
                   branches: Branches | None = None, **_) -> FitResult:  # fmt: skip
        return fit_mass(train, p, branches=branches, run_dir=run_dir, resume=resume,
                        progress=progress)  # fmt: skip
