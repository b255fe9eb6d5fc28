from __future__ import annotations

from bench.quality import adaptive_params, plan, verdict


def test_plan_has_every_group_of_the_issue():
    rows = plan(("ablation", "sweep", "genfilter", "targets"))
    groups = {r["group"] for r in rows}
    assert groups == {"ablation", "sweep", "genfilter", "targets"}
    targets = [r for r in rows if r["group"] == "targets"]
    # each direction, agnostic only (R unknown to training) and attribute-specific (R known)
    for s, r in (("colour", "digit"), ("digit", "colour")):
        mine = [t for t in targets if t["suppress"] == [s]]
        assert {tuple(t["preserve"]) for t in mine} == {(), (r,)}
        assert all(t["report"] == [r] for t in mine)
    sweep = [r["params"]["w_rstar"] for r in rows if r["group"] == "sweep"]
    assert sweep == sorted(sweep) and len(sweep) >= 4


def test_adaptive_params_take_the_train_section_without_row_keys(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("train:\n  suppress: digit\n  preserve: colour\n  mode: adaptive\n  seed: 3\n"
                 "  epochs: 9\n  lr: 0.005\n  adaptive:\n    output_noise: 0.2\n")  # fmt: skip
    assert adaptive_params(str(p)) == {"lr": 0.005, "adaptive": {"output_noise": 0.2}}


def _attr(role, **kw):
    base = {"role": role, "majority": 0.1, "floor": 0.1, "frozen_x": 0.9, "original": 0.9}
    return {**base, **kw}


def test_verdict_applies_both_protocols():
    ok = {"s": _attr("suppress", frozen_xmod=0.11, worst_xmod=0.14),
          "r": _attr("preserve", frozen_xmod=0.86, worst_xmod=0.82)}  # fmt: skip
    assert verdict(ok) == {"frozen_ok": True, "retrained_ok": True}
    leaky = {**ok, "s": _attr("suppress", frozen_xmod=0.11, worst_xmod=0.16)}
    assert verdict(leaky) == {"frozen_ok": True, "retrained_ok": False}
    lossy = {**ok, "r": _attr("preserve", frozen_xmod=0.85, worst_xmod=0.80)}
    assert verdict(lossy) == {"frozen_ok": False, "retrained_ok": False}
    # the floor, not the majority rate, is the bar when R reveals s
    floored = {**ok, "s": _attr("suppress", floor=0.5, frozen_xmod=0.1, worst_xmod=0.54)}
    assert verdict(floored)["retrained_ok"]
