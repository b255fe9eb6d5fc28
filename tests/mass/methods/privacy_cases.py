"""Data, attackers and method settings of test_privacy.py (also runnable to print the table).

    python tests/mass/methods/privacy_cases.py [METHOD ...]

prints, per method, what every attacker retrained on the method's output reads of the
suppressed attribute ``s`` and of the preserved attribute ``u`` (held-out accuracy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from mass.methods import get_method
from mass.methods._common import subset
from mass.synthetic import make_synthetic

N_TRAIN, N_TEST, DIM = 1200, 800, 16
ATTACKERS = ("logreg", "mlp", "knn", "gboost")
NONLINEAR = ("mlp", "knn", "gboost")


def dataset(seed: int = 4):
    """Binary s with a linear (class mean) and a second-order (class spread) signal; binary u
    independent of s (rho=0), linear only. Split train/test by row."""
    full = make_synthetic(
        N_TRAIN + N_TEST, DIM, s_classes=2, u_classes=2, rho=0.0, sep_s=0.6, sep_u=1.0,
        noise=0.35, spread_s=1.2, spread_dims=4, seed=seed,
    )  # fmt: skip
    return subset(full, np.arange(N_TRAIN)), subset(full, np.arange(N_TRAIN, N_TRAIN + N_TEST))


def attacker(family: str, seed: int = 0):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if family == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    if family == "mlp":
        return make_pipeline(
            StandardScaler(),
            MLPClassifier((64, 64), max_iter=600, early_stopping=True, random_state=seed),
        )
    if family == "knn":
        return make_pipeline(StandardScaler(), KNeighborsClassifier(15))
    if family == "gboost":
        return HistGradientBoostingClassifier(max_iter=150, random_state=seed)
    raise ValueError(family)


def attack(a: np.ndarray, y_a: np.ndarray, b: np.ndarray, y_b: np.ndarray) -> dict[str, float]:
    """Held-out accuracy of every attacker family trained on (a, y_a), tested on (b, y_b)."""
    return {f: float(attacker(f).fit(a, y_a).score(b, y_b)) for f in ATTACKERS}


def chance(y: np.ndarray) -> float:
    """Majority-class rate: what an attacker that learned nothing scores."""
    return float(np.bincount(y).max() / len(y))


# name -> (registry method, params). Epoch counts are cut to keep each fit to seconds.
_MASS = {"epochs": 20, "branch_epochs": 10, "agnostic_epochs": 3, "batch_size": 64}
METHODS: dict[str, tuple[str, dict]] = {
    "mass_faithful": ("mass", {**_MASS, "mode": "faithful", "w_rstar": 0}),
    "mass_adaptive": ("mass", {**_MASS, "mode": "adaptive", "w_rstar": 0}),
    "mass_adaptive_leace": (
        "mass",
        {**_MASS, "mode": "adaptive", "w_rstar": 0, "adaptive": {"pre_erase": "leace"}},
    ),
    "mass_adaptive_quadratic": (
        "mass",
        {**_MASS, "mode": "adaptive", "w_rstar": 0, "adaptive": {"pre_erase": "quadratic"}},
    ),
    "unlearning": ("unlearning", {"epochs": 15}),
    "end": ("end", {"epochs": 15}),
    "genfilter": ("genfilter", {"vae_epochs": 25, "filter_epochs": 25, "budget": 50.0}),
    "gaussian": ("gaussian", {"sigma": 0.5}),
    "leace": ("leace", {}),
    "leace_quadratic": ("leace_quadratic", {}),
    "leace_iterated": ("leace_iterated", {}),
    "leace_project": ("leace_project", {}),
    "inlp": ("inlp", {}),
}


@dataclass
class Measured:
    s: dict[str, float]  # attacker -> held-out accuracy on the suppressed attribute
    u: dict[str, float]  # attacker -> held-out accuracy on the preserved attribute
    chance_s: float
    chance_u: float
    seconds: float
    extra: dict = field(default_factory=dict)


def release(modifier, x: np.ndarray, seed: int) -> np.ndarray:
    """The modifier's output for rows ``x``, with secret-like random per-row seeds."""
    seeds = np.random.default_rng(seed).integers(0, 2**62, size=len(x), dtype=np.int64)
    with torch.no_grad():
        return modifier.eval()(torch.as_tensor(x), torch.as_tensor(seeds)).numpy()


@torch.no_grad()
def frozen_judge(model, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of a frozen branch classifier (logits, or a tuple ending in logits) on x."""
    fn = model.logits if hasattr(model, "logits") else model
    out = fn(torch.as_tensor(x))
    logits = out[-1] if isinstance(out, tuple) else out
    return float((logits.argmax(dim=1).numpy() == y).mean())


def measure(name: str, tr=None, te=None, *, seed: int = 0) -> Measured:
    """Fit method ``name`` on the training split, release both splits, attack the release."""
    torch.set_num_threads(1)
    if tr is None:
        tr, te = dataset()
    method, params = METHODS[name]
    t0 = time.perf_counter()
    fit = get_method(method).fit(
        tr, suppress=["s"], preserve=["u"], params=params, seed=seed, progress=False
    )
    a, b = release(fit.modifier, tr.x, 1 + 2 * seed), release(fit.modifier, te.x, 2 + 2 * seed)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise AssertionError(f"{name}: non-finite release")
    s = attack(a, tr.labels["s"], b, te.labels["s"])
    u = attack(a, tr.labels["u"], b, te.labels["u"])
    extra = {}
    if "s" in fit.branches:  # MaSS's frozen judge, read on the released test rows
        extra["frozen_s"] = frozen_judge(fit.branches["s"], b, te.labels["s"])
    return Measured(
        s, u, chance(te.labels["s"]), chance(te.labels["u"]), time.perf_counter() - t0, extra
    )


def measure_original(tr=None, te=None) -> Measured:
    if tr is None:
        tr, te = dataset()
    t0 = time.perf_counter()
    s = attack(tr.x, tr.labels["s"], te.x, te.labels["s"])
    u = attack(tr.x, tr.labels["u"], te.x, te.labels["u"])
    return Measured(s, u, chance(te.labels["s"]), chance(te.labels["u"]), time.perf_counter() - t0)


def _row(name: str, m: Measured) -> str:
    cells = [f"{m.s[f]:.3f}" for f in ATTACKERS] + [f"{m.u[f]:.3f}" for f in ("logreg", "mlp")]
    frozen = f"{m.extra['frozen_s']:.3f}" if "frozen_s" in m.extra else "-"
    return f"| {name} | " + " | ".join(cells) + f" | {frozen} | {m.seconds:.1f} |"


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]
    seeds = [0]
    if args and args[0].startswith("--seeds="):  # method seeds, e.g. --seeds=0,1,2
        seeds = [int(v) for v in args.pop(0).split("=", 1)[1].split(",")]
    names = args or list(METHODS)
    tr, te = dataset()
    orig = measure_original(tr, te)
    print(f"chance s={orig.chance_s:.3f} u={orig.chance_u:.3f}")
    print(
        "| method | s logreg | s mlp | s knn | s gboost | u logreg | u mlp | frozen s | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(_row("original", orig), flush=True)
    for n in names:
        for sd in seeds:
            print(
                _row(n if sd == 0 else f"{n} (seed {sd})", measure(n, tr, te, seed=sd)), flush=True
            )
