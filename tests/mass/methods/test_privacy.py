"""Every method against attackers RETRAINED on its output (the claim a release must survive).

Data (privacy_cases.dataset): 1200 train / 800 test rows, dim 16; binary ``s`` carried both
linearly (class means) and second-order (each class spreads in its own subspace), binary ``u``
independent of ``s``. Each method is fitted on the train split (suppress s, preserve u), both
splits are released with secret-like random row seeds, and logistic regression, an MLP, kNN
and gradient boosting are trained on the released train split and scored on the released test
split. Checks are two-sided: an accuracy far BELOW chance is a leak too (labels flipped, not
removed), so every band has a lower end. Methods that are known to leak have an
"expected to leak" entry that asserts the leak, so a change in either direction fails here
and must update the table below.

Measured (``python tests/mass/methods/privacy_cases.py --seeds=0,1,2``; chance s = 0.515,
u = 0.502; held-out accuracy; the tests use seed 0; ranges are over method seeds 0-2):

| method | s logreg | s mlp | s knn | s gboost | u logreg | u mlp | frozen s |
|---|---|---|---|---|---|---|---|
| original data | 0.782 | 0.964 | 0.974 | 0.969 | 0.864 | 0.882 | - |
| mass faithful | 0.953-0.973 | 0.955-0.973 | 0.940-0.971 | 0.941-0.971 | 0.900-0.909 | 0.892-0.910 | 0.021-0.096 |
| mass adaptive | 0.479-0.580 | 0.515-0.604 | 0.544-0.596 | 0.554-0.603 | 0.698-0.740 | 0.695-0.716 | 0.506-0.515 |
| adaptive + pre_erase leace | 0.486-0.522 | 0.496-0.534 | 0.531-0.562 | 0.520-0.550 | 0.696-0.726 | 0.695-0.704 | 0.468-0.517 |
| adaptive + pre_erase quadratic | 0.504-0.565 | 0.525-0.571 | 0.540-0.560 | 0.537-0.573 | 0.726-0.754 | 0.701-0.733 | 0.520-0.531 |
| unlearning | 0.720-0.828 | 0.949-0.971 | 0.955-0.961 | 0.939-0.963 | 0.907-0.911 | 0.884-0.911 | - |
| end | 0.536-0.549 | 0.920-0.944 | 0.940-0.954 | 0.940-0.948 | 0.896-0.912 | 0.889-0.900 | - |
| genfilter | 0.767-0.824 | 0.911-0.917 | 0.904-0.912 | 0.899-0.906 | 0.746-0.795 | 0.741-0.801 | - |
| gaussian sigma=0.5 | 0.596-0.626 | 0.605-0.635 | 0.626-0.642 | 0.596-0.626 | 0.618-0.637 | 0.595-0.621 | - |
| leace (deterministic) | 0.482 | 0.958 | 0.955 | 0.946 | 0.863 | 0.870 | - |
| leace_quadratic (deterministic) | 0.594 | 0.750 | 0.726 | 0.739 | 0.856 | 0.855 | - |
| leace_project (deterministic) | 0.485 | 0.521 | 0.546 | 0.524 | 0.859 | 0.859 | - |
| inlp | 0.516-0.573 | 0.929-0.939 | 0.939-0.955 | 0.925-0.945 | 0.814-0.825 | 0.785-0.831 | - |

With 800 test rows one accuracy has a standard error of about 0.018 at chance, so a band
"at chance" is chance - 0.07 .. chance + 0.10 (the widest seed-to-seed spread seen for the
adaptive modes is +0.09); leak bands start well under the lowest measured value.
Run time: about 35 s for all methods on one core.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import privacy_cases as pc  # noqa: E402

AT_CHANCE = (-0.07, 0.10)  # offsets from chance: the attacker learned nothing
LINEAR_CHANCE = (-0.07, 0.09)  # closed-form linear erasers vs the linear attacker


@dataclass(frozen=True)
class Expect:
    """Bands (offsets from chance) for the suppressed attribute and floors for the preserved."""

    linear: tuple[float, float]  # retrained logistic regression on s
    nonlinear: tuple[float, float]  # every retrained MLP / kNN / gradient boosting on s
    u_min: float  # retrained logreg and MLP on u reach at least this accuracy
    why: str
    frozen: tuple[float, float] | None = None  # MaSS's frozen judge on s (offsets)
    u_max: float = 1.0


EXPECT = {
    "mass_faithful": Expect(
        linear=(0.30, 0.49),
        nonlinear=(0.30, 0.49),
        frozen=(-0.51, -0.30),
        u_min=0.85,
        why="EXPECTED TO LEAK: faithful MaSS fools its frozen judge by flipping s (frozen "
        "accuracy far below chance) and every retrained attacker reads s back",
    ),
    "mass_adaptive": Expect(
        linear=AT_CHANCE,
        # Measured 2026-11-23 (`python tests/mass/methods/privacy_cases.py --seeds=0,1,2
        # mass_adaptive`): a retrained MLP reads s at 0.616 / 0.535 / 0.579 over method seeds
        # 0-2 (chance 0.515), i.e. up to +0.101 - at the old +0.10 edge, so the test failed or
        # passed by floating-point noise between machines. Adaptive MaSS alone is NOT at chance
        # against non-linear attackers; the pre-erased variants below are, and that is why
        # calibration and the demo put an eraser first.
        nonlinear=(-0.07, 0.13),
        frozen=AT_CHANCE,
        u_min=0.65,
        why="online adversaries + matching + keyed output noise: linear attackers at chance, "
        "non-linear ones within +0.13",
    ),
    "mass_adaptive_leace": Expect(
        linear=AT_CHANCE,
        nonlinear=AT_CHANCE,
        frozen=AT_CHANCE,
        u_min=0.65,
        why="as adaptive, after a LEACE pre-erasure",
    ),
    "mass_adaptive_quadratic": Expect(
        linear=AT_CHANCE,
        nonlinear=AT_CHANCE,
        frozen=AT_CHANCE,
        u_min=0.65,
        why="as adaptive, after a quadratic-LEACE pre-erasure",
    ),
    "unlearning": Expect(
        linear=(0.15, 0.49),
        nonlinear=(0.35, 0.49),
        u_min=0.85,
        why="EXPECTED TO LEAK: its MI penalty only blinds its own aux head",
    ),
    "end": Expect(
        linear=(-0.07, 0.10),
        nonlinear=(0.33, 0.49),
        u_min=0.85,
        why="EXPECTED TO LEAK to non-linear attackers: the Gram term removes the linear "
        "signal only",
    ),
    "genfilter": Expect(
        linear=(0.18, 0.49),
        nonlinear=(0.33, 0.49),
        u_min=0.68,
        why="EXPECTED TO LEAK: the filter's linear latent adversary leaves s decodable",
    ),
    "gaussian": Expect(
        linear=(0.03, 0.20),
        nonlinear=(0.03, 0.20),
        u_min=0.55,
        u_max=0.72,
        why="EXPECTED TO LEAK PARTLY: isotropic noise blurs s and u alike (utility paid too)",
    ),
    "leace": Expect(
        linear=LINEAR_CHANCE,
        nonlinear=(0.35, 0.49),
        u_min=0.80,
        why="linear eraser: linear attacker at chance; EXPECTED TO LEAK to non-linear ones "
        "(the second-order signal is untouched)",
    ),
    "leace_quadratic": Expect(
        linear=(0.03, 0.17),
        nonlinear=(0.13, 0.32),
        u_min=0.80,
        why="EXPECTED TO LEAK PARTLY: transports by a predicted class, so rows the linear "
        "predictor gets wrong keep their covariance signal",
    ),
    "leace_iterated": Expect(
        linear=(0.03, 0.12),
        nonlinear=(0.35, 0.49),
        u_min=0.80,
        why="EXPECTED TO LEAK: LEACE refitted through the renormalisation (default settings); "
        "measured here linear 0.579 (chance 0.515, plain LEACE 0.482), non-linear 0.95",
    ),
    "leace_project": Expect(
        linear=LINEAR_CHANCE,
        nonlinear=AT_CHANCE,
        u_min=0.80,
        why="LEACE given u, then only u's discriminant direction is kept: s's second-order "
        "signal lives outside it (data minimisation: nothing but u survives)",
    ),
    "inlp": Expect(
        linear=LINEAR_CHANCE,
        nonlinear=(0.33, 0.49),
        u_min=0.75,
        why="linear nullspace projection; EXPECTED TO LEAK to non-linear attackers",
    ),
}


@pytest.fixture(scope="module")
def data():
    return pc.dataset()


def test_every_registered_method_has_a_privacy_expectation():
    from mass.methods import METHODS

    covered = {pc.METHODS[name][0] for name in EXPECT}
    # gaussian_budget is genfilter's noise baseline; its privacy is genfilter's test's subject.
    # ot_repair's is tests/mass/methods/test_ot_repair.py's: this module's protocol trains the
    # attackers on the rows the method was fitted on, where it is at chance; on held-out rows it
    # leaks (docs/calibration.md, "OT repair"), which that test and the docs state.
    assert set(METHODS) - covered == {"gaussian_budget", "ot_repair"}
    assert set(EXPECT) == set(pc.METHODS)


def test_before_any_method_s_is_linearly_and_non_linearly_recoverable(data):
    m = pc.measure_original(*data)
    assert m.s["logreg"] > m.chance_s + 0.2, m.s  # linear signal (class means)
    for fam in pc.NONLINEAR:  # and the second-order signal on top: > 0.9
        assert m.s[fam] > m.s["logreg"] + 0.1 and m.s[fam] > 0.9, (fam, m.s)
    assert min(m.u["logreg"], m.u["mlp"]) > 0.8, m.u


def _in_band(acc: float, chance: float, band: tuple[float, float]) -> bool:
    return chance + band[0] <= acc <= chance + band[1]


@pytest.mark.parametrize("name", list(EXPECT))
@pytest.mark.slow
def test_method_against_retrained_attackers(name, data):
    exp = EXPECT[name]
    m = pc.measure(name, *data)
    c = m.chance_s
    table = f"{name} ({exp.why}): s={m.s} u={m.u} chance={c:.3f} extra={m.extra}"
    assert _in_band(m.s["logreg"], c, exp.linear), f"linear attacker out of band: {table}"
    for fam in pc.NONLINEAR:
        assert _in_band(m.s[fam], c, exp.nonlinear), f"{fam} out of band: {table}"
    if exp.frozen is not None:
        assert _in_band(m.extra["frozen_s"], c, exp.frozen), f"frozen judge: {table}"
    for fam in ("logreg", "mlp"):
        assert exp.u_min <= m.u[fam] <= exp.u_max, f"preserved u ({fam}): {table}"


def test_far_below_chance_is_reported_as_a_leak():
    """The two-sided band: a judge that is always wrong knows s exactly."""
    assert not _in_band(0.05, 0.5, AT_CHANCE) and not _in_band(0.95, 0.5, AT_CHANCE)
    assert _in_band(0.5, 0.5, AT_CHANCE)
    y = np.array([0, 1, 1, 1])
    assert pc.chance(y) == 0.75
