"""The gate's refusal names what failed as audit.json measured it: a released column whose
judges read a suppressed attribute over its limit "alone predicts it"; one whose judges read
it within the limit, with only their 95% bounds over it on a small audit, is said to be
unresolved for lack of rows (before: "alone predicts it" for ids read at chance on 158 rows)."""

from __future__ import annotations

from beam_pipelines.gate import _failures

LIMIT, BAL = 0.645, 0.55


def _metrics(id_point: float, id_balanced: float) -> dict:
    judges = ("logreg", "logreg@id", "logreg@id_remap")
    point = {"logreg": 0.70, "logreg@id": id_point, "logreg@id_remap": 0.595}
    balanced = {"logreg": 0.68, "logreg@id": id_balanced, "logreg@id_remap": 0.46}
    row = {"role": "suppressed", "pass": False, "n": 158, "worst": 0.70,
           "ci_high": {j: point[j] + 0.07 for j in judges},
           "balanced_ci_high": {j: balanced[j] + 0.07 for j in judges},
           "limit": LIMIT, "balanced_limit": BAL, "limits": dict.fromkeys(judges, LIMIT),
           "balanced_limits": dict.fromkeys(judges, BAL), "balanced": balanced,
           "leaking_columns": ["id"], **point}  # fmt: skip
    return {"attributes": {"female": row}, "release": {"id_col": "id"}}


def test_ids_read_within_the_limit_are_unresolved_not_predictive():
    msg = _failures(_metrics(0.538, 0.507))
    assert "alone predicts it" not in msg
    assert ("the id column 'id' is read at most 0.595 by its judges, within the limit, but on "
            "158 audited rows their 95% upper bounds exceed it") in msg  # fmt: skip


def test_ids_read_over_the_limit_predict_it():
    assert "the id column 'id' alone predicts it" in _failures(_metrics(0.66, 0.507))
    assert "the id column 'id' alone predicts it" in _failures(_metrics(0.538, 0.58))
