"""Training of the data modifier G against frozen branch models (App. B.3), plus adaptive mode.

Faithful mode minimises eq. 9 with AdamW (wd 0.05) and a cosine schedule; every branch model
is frozen (eval mode, ``requires_grad=False``), so gradients reach G only through x'.

Adaptive mode (beyond the paper) adds, per suppressed attribute s:
- online adversaries (linear and MLP) trained on the detached x' after every G step
  (alternating min-max) and re-initialised every ``adv_reinit_every`` epochs; G pays
  KL(class prior || adversary posterior) so it drives them to the prior, not to wrong labels;
- a stochastic G (``noise_dim`` > 0) fed row-seeded noise (``mass.noise.row_noise``);
- a distribution-matching term making x' alike across values of s, within strata of R.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass import losses
from mass.branch_models import AgnosticModel, AttributeClassifier
from mass.config import MassConfig
from mass.modifiers import DataModifier, ModifierSpec, mlp
from mass.progress import progress as progress_bar
from mass.safe_load import plain


@dataclass
class Branches:
    """The frozen models G is trained against."""

    classifiers: dict[str, AttributeClassifier] = field(default_factory=dict)
    agnostic: AgnosticModel | None = None

    def parameters(self):
        for m in self.classifiers.values():
            yield from m.parameters()
        if self.agnostic is not None:
            yield from self.agnostic.parameters()


def make_adversary(family: str, dim: int, num_classes: int, hidden: int) -> nn.Module:
    if family == "linear":
        return nn.Linear(dim, num_classes)
    if family == "mlp":
        return mlp([dim, hidden, hidden, num_classes])
    raise ValueError(f"unknown adversary family {family!r}")


class Adversaries(nn.Module):
    """Online attackers of each suppressed attribute, one per family (adaptive mode)."""

    def __init__(self, cfg: MassConfig, dim: int, num_classes: dict[str, int]):
        super().__init__()
        self.cfg, self.dim, self.num_classes = cfg, dim, num_classes
        self.models = nn.ModuleDict()
        self.reset(seed=cfg.seed)

    def _attributes(self) -> tuple[str, ...]:
        return self.cfg.suppress

    def _families(self) -> tuple[str, ...]:
        return self.cfg.adaptive.adversaries

    def reset(self, *, seed: int) -> None:
        torch.manual_seed(seed)
        ad = self.cfg.adaptive
        self.models = nn.ModuleDict(
            {f"{s}__{fam}": make_adversary(fam, self.dim, self.num_classes[s], ad.adv_hidden)
             for s in self._attributes() for fam in self._families()}
        )  # fmt: skip
        self.opt = torch.optim.Adam(self.models.parameters(), lr=ad.adv_lr)

    def step(self, x_mod: torch.Tensor, y: dict[str, torch.Tensor]) -> float:
        """One CE update of every adversary on the detached x'; returns the mean CE."""
        x_mod = x_mod.detach()
        loss = torch.stack(
            [F.cross_entropy(m(x_mod), y[k.split("__")[0]]) for k, m in self.models.items()]
        ).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def prior_loss(self, x_mod: torch.Tensor, priors: dict[str, torch.Tensor]) -> torch.Tensor:
        """G's term: sum over adversaries of KL(prior || posterior on x'); no adversary grads."""
        total = x_mod.sum() * 0.0
        for k, m in self.models.items():
            for p in m.parameters():
                p.requires_grad_(False)
            total = total + losses.prior_kl_loss(m(x_mod), priors[k.split("__")[0]])
            for p in m.parameters():
                p.requires_grad_(True)
        return total


class UtilityLearners(Adversaries):
    """Online MLP classifiers of each preserved attribute on x' (adaptive mode).

    The mirror image of :class:`Adversaries`: they are retrained on the detached x' every
    step and G *minimises* their cross-entropy, so R stays readable by a retrained
    non-linear classifier (what the audit measures), not only by the frozen judges.
    """

    def _attributes(self) -> tuple[str, ...]:
        return self.cfg.preserve

    def _families(self) -> tuple[str, ...]:
        return ("mlp",)

    def utility_loss(self, x_mod: torch.Tensor, y: dict[str, torch.Tensor]) -> torch.Tensor:
        total = x_mod.sum() * 0.0
        for k, m in self.models.items():
            for p in m.parameters():
                p.requires_grad_(False)
            total = total + F.cross_entropy(m(x_mod), y[k.split("__")[0]])
            for p in m.parameters():
                p.requires_grad_(True)
        return total


def _strata(labels: dict[str, torch.Tensor], attrs: tuple[str, ...], n: int) -> torch.Tensor:
    st = torch.zeros(n, dtype=torch.long)
    for a in attrs:
        st = st * (int(labels[a].max()) + 1) + labels[a]
    return st


class ModifierTrainer:
    """Composes the loss terms of eq. 9 (and the adaptive ones) and runs the epochs."""

    def __init__(self, cfg: MassConfig, branches: Branches, *, dim: int, num_classes: dict):
        self.cfg, self.branches, self.num_classes = cfg, branches, num_classes
        ad = cfg.adaptive
        stochastic = cfg.adaptive_on and ad.noise_dim > 0
        torch.manual_seed(cfg.seed)
        self.spec = ModifierSpec(
            dim=dim, hidden=tuple(cfg.hidden),
            noise_dim=ad.noise_dim if stochastic else 0, noise_scale=ad.noise_scale,
            residual_scale=ad.residual_scale if cfg.adaptive_on else 1.0,
            output_noise=ad.output_noise if cfg.adaptive_on else 0.0,
        )  # fmt: skip
        self.modifier = DataModifier(self.spec)
        self.opt = torch.optim.AdamW(
            self.modifier.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        self.adversaries = None
        if cfg.adaptive_on and ad.adversaries:
            self.adversaries = Adversaries(cfg, dim, num_classes)
        self.utility = None
        if cfg.adaptive_on and ad.utility_weight > 0 and cfg.preserve:
            self.utility = UtilityLearners(cfg, dim, num_classes)
        self.history: list[dict[str, float]] = []
        self.start_epoch = 0

    def loss_terms(
        self, x: torch.Tensor, x_mod: torch.Tensor, y: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        terms = {"rec": losses.reconstruction_loss(x_mod, x, w_rec=cfg.w_rec)}
        for s in cfg.suppress:
            model = self.branches.classifiers[s]
            with torch.no_grad():
                z, p = model(x)
            z_m, p_m = model(x_mod)
            sim = losses.similarity(cfg.sim_s, z_mod=z_m, z_orig=z, p_mod=p_m, p_orig=p, y=y[s])
            terms[f"s:{s}"] = losses.suppression_loss(
                sim, p_m, w_s=cfg.weight_s(s), h_s=cfg.entropy_weight(s)
            )
        if self.branches.agnostic is not None and cfg.w_rstar > 0:
            with torch.no_grad():
                p = self.branches.agnostic(x)[1]
            p_m = self.branches.agnostic(x_mod)[1]
            terms["r*"] = losses.agnostic_preservation_loss(
                p, p_m, w_rstar=cfg.w_rstar, tau=cfg.tau
            )
        for r in cfg.preserve:
            if r not in self.branches.classifiers or cfg.weight_r(r) == 0:
                continue
            model = self.branches.classifiers[r]
            with torch.no_grad():
                z, p = model(x)
            z_m, p_m = model(x_mod)
            sim = losses.similarity(cfg.sim_r, z_mod=z_m, z_orig=z, p_mod=p_m, p_orig=p, y=y[r])
            terms[f"r:{r}"] = losses.preservation_loss(sim, w_r=cfg.weight_r(r))
        ad = cfg.adaptive
        if self.adversaries is not None:
            terms["adv"] = ad.adv_weight * self.adversaries.prior_loss(x_mod, self.priors)
        if self.utility is not None:
            terms["util"] = ad.utility_weight * self.utility.utility_loss(x_mod, y)
        if cfg.adaptive_on and ad.match != "none":
            strata = None
            if ad.match_within_preserved and cfg.preserve:
                strata = _strata(y, cfg.preserve, len(x))
            terms["match"] = ad.match_weight * sum(
                losses.group_matching_loss(x_mod, y[s], kind=ad.match, strata=strata)
                for s in cfg.suppress
            )
        return terms

    def fit(
        self,
        x: np.ndarray,
        labels: dict[str, np.ndarray],
        *,
        seeds: np.ndarray | None = None,
        checkpoint: str | None = None,
        resume: bool = False,
        progress: bool = True,
        stop_after: int | None = None,
    ) -> list[dict[str, float]]:
        """Train G; ``stop_after`` ends after that many epochs of this call (the schedule
        still spans ``cfg.epochs``, so a later ``resume`` continues the same run)."""
        cfg = self.cfg
        xt = torch.as_tensor(x, dtype=torch.float32)
        yt = {a: torch.as_tensor(v, dtype=torch.long) for a, v in labels.items()}
        st = torch.as_tensor(seeds if seeds is not None else np.arange(len(x)), dtype=torch.long)
        self.priors = {
            s: torch.bincount(yt[s], minlength=self.num_classes[s]).float() / len(xt)
            for s in cfg.suppress
        }
        n = len(xt)
        steps_per_epoch = max(1, n // cfg.batch_size)
        total = cfg.epochs * steps_per_epoch
        sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total))
        )
        if resume and checkpoint and os.path.exists(checkpoint):
            self._load(checkpoint, sched)
        for p in self.branches.parameters():
            p.requires_grad_(False)
        for m in [*self.branches.classifiers.values(), self.branches.agnostic]:
            if m is not None:
                m.eval()  # BatchNorm of a frozen branch must use its running statistics
        bar = progress_bar(total, desc="train G", enabled=progress,
                           initial=self.start_epoch * steps_per_epoch,
                           rows_per_step=cfg.batch_size)  # fmt: skip
        try:
            end = (
                cfg.epochs if stop_after is None else min(cfg.epochs, self.start_epoch + stop_after)
            )
            for epoch in range(self.start_epoch, end):
                self._epoch(epoch, xt, yt, st, sched, steps_per_epoch, bar)
                if checkpoint:
                    self._save(checkpoint, sched, epoch)
        finally:
            if bar is not None:
                bar.close()
        self.modifier.eval()
        return self.history

    def _epoch(self, epoch, xt, yt, st, sched, steps, bar) -> None:
        cfg, ad = self.cfg, self.cfg.adaptive
        t0 = time.perf_counter()
        if (
            self.adversaries is not None
            and ad.adv_reinit_every
            and epoch % ad.adv_reinit_every == 0
        ):
            self.adversaries.reset(seed=cfg.seed * 1000 + epoch)
        # the shuffle depends on (seed, epoch) only, so a resumed run replays the same batches
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        perm = torch.randperm(len(xt), generator=gen)
        sums: dict[str, float] = {}
        self.modifier.train()
        for i in range(steps):
            idx = perm[i * cfg.batch_size : (i + 1) * cfg.batch_size]
            x, y = xt[idx], {a: v[idx] for a, v in yt.items()}
            x_mod = self.modifier(x, st[idx] if self.modifier.stochastic else None)
            terms = self.loss_terms(x, x_mod, y)
            loss = losses.total_loss(terms)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            sched.step()
            if self.adversaries is not None:
                for _ in range(ad.adv_steps):
                    terms["adv_ce"] = torch.tensor(self.adversaries.step(x_mod, y))
            if self.utility is not None:
                for _ in range(ad.adv_steps):
                    terms["util_ce"] = torch.tensor(self.utility.step(x_mod, y))
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
            sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
            if bar is not None:
                bar.update(1)
                if i % 10 == 0:
                    bar.set_postfix({k: f"{v:.3g}" for k, v in terms.items()}, refresh=False)
        rec = {k: v / steps for k, v in sums.items()}
        rec.update(epoch=epoch, seconds=time.perf_counter() - t0)
        self.history.append(rec)

    def _save(self, path: str, sched, epoch: int) -> None:
        blob = {
            "epoch": epoch, "config_hash": self.cfg.config_hash(),
            "modifier": self.modifier.state_dict(), "opt": self.opt.state_dict(),
            "sched": sched.state_dict(), "history": plain(self.history, where="history"),
            "adversaries": None if self.adversaries is None else {
                "models": self.adversaries.models.state_dict(),
                "opt": self.adversaries.opt.state_dict()},
        }  # fmt: skip
        tmp = path + ".tmp"
        torch.save(blob, tmp)
        os.replace(tmp, path)  # a crash mid-write never leaves a truncated checkpoint

    def _load(self, path: str, sched) -> None:
        from mass.errors import ConfigError
        from mass.safe_load import load_checkpoint

        remedy = "delete it and train again without --resume"
        blob = load_checkpoint(path, what="training checkpoint", remedy=remedy)
        if not isinstance(blob, dict) or "config_hash" not in blob:
            raise ConfigError(f"{path}: not a training checkpoint of `mass train`; {remedy}")
        if blob["config_hash"] != self.cfg.config_hash():
            raise ConfigError(
                f"{path}: checkpoint was written with another config "
                f"(hash {blob['config_hash'][:12]} != {self.cfg.config_hash()[:12]}); "
                "use a new --out or drop --resume"
            )
        self.modifier.load_state_dict(blob["modifier"])
        self.opt.load_state_dict(blob["opt"])
        sched.load_state_dict(blob["sched"])
        if self.adversaries is not None and blob["adversaries"]:
            self.adversaries.models.load_state_dict(blob["adversaries"]["models"])
            self.adversaries.opt.load_state_dict(blob["adversaries"]["opt"])
        self.history = list(blob["history"])
        self.start_epoch = int(blob["epoch"]) + 1
