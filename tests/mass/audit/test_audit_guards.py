"""The custom expectations on hand-made judge rows (what mass.audit.runner.judge_frame gives
them), for the branches no audited release reaches: a judge row of the wrong role, and the
frozen judge offered as proof of preservation. Kills the mutants audit-role-unchecked and
audit-preserved-counts-frozen (tests/mutation/mutants.py)."""

from __future__ import annotations

from mass.audit.expectations import ExpectAttributeToBePreserved, ExpectAttributeToBeSuppressed


def _row(judge: str, role: str, acc: float, original: float = 0.9) -> dict:
    return {"attribute": "s", "role": role, "judge": judge, "accuracy": acc, "majority": 0.5,
            "floor": 0.5, "original": original, "balanced": acc, "ci_high": acc,
            "balanced_ci_high": acc, "chance": 0.5, "balanced_floor": 0.5}  # fmt: skip


def _suppressed(rows: list[dict]) -> dict:
    exp = ExpectAttributeToBeSuppressed(attribute="s", margins={"logreg": 0.05})
    return exp._validate({"mass.attribute_judges": rows})


def _preserved(rows: list[dict]) -> dict:
    exp = ExpectAttributeToBePreserved(attribute="s", min_fraction=0.9)
    return exp._validate({"mass.attribute_judges": rows})


def test_suppression_passes_on_its_own_rows_and_refuses_rows_of_another_role():
    assert _suppressed([_row("logreg", "suppressed", 0.52)])["success"] is True
    assert _suppressed([_row("logreg", "suppressed", 0.60)])["success"] is False
    # the same numbers under role "preserved" are no evidence of suppression
    wrong = _suppressed([_row("logreg", "preserved", 0.52)])
    assert wrong["success"] is False
    assert wrong["result"]["observed_value"].startswith("FAILED logreg")


def test_preservation_counts_retrained_attackers_only():
    kept = [_row("logreg", "preserved", 0.85), _row("frozen", "preserved", 0.85)]
    assert _preserved(kept)["success"] is True
    # issue 37: the frozen judge is a second requirement (never proof): a release read
    # inside out by a model trained on the original fails, whatever retrained attackers read
    inverted = _preserved([_row("logreg", "preserved", 0.85), _row("frozen", "preserved", 0.2)])
    assert inverted["success"] is False
    assert inverted["result"]["observed_value"].startswith("FAILED frozen")
    # its margin: FROZEN_SLACK (0.1) below min_fraction, against its own original accuracy
    retrained = _row("logreg", "preserved", 0.85)
    assert _preserved([retrained, _row("frozen", "preserved", 0.73)])["success"]  # 0.811 kept
    assert not _preserved([retrained, _row("frozen", "preserved", 0.71)])["success"]  # 0.789
    assert _preserved([_row("logreg", "preserved", 0.5)])["success"] is False
    # the frozen judge still reading the attribute proves nothing about what a user can learn
    lost = _preserved([_row("logreg", "preserved", 0.5), _row("frozen", "preserved", 0.9)])
    assert lost["success"] is False and lost["result"]["details"]["judge"] == "logreg"
    assert _preserved([_row("frozen", "preserved", 0.9)])["success"] is False
