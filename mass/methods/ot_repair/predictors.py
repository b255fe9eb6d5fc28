"""``ot_repair``'s label and predictor fit steps: the joint label of several attributes, the
class predictor p(s | x) the served transport reads its classes from, and the linear
predictors of a preserved class that cells use (k-means cells by R, rank cells' groups).

Each step takes tensors and params and returns what it fitted; the modifiers are built from
those values (:meth:`mass.modifiers.sliced_repair.SlicedRepairModifier.from_fit`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass.errors import ConfigError
from mass.methods._common import batches, label_tensors, n_classes
from mass.methods.ot_repair.params import RepairParams
from mass.modifiers.sliced_repair import class_predictor, predictor_logits

MAX_JOINT_CLASSES = 256


def joint_label(train, attrs: list[str], role: str = "suppressed") -> tuple[torch.Tensor, int]:
    """One label over the attributes' joint classes, and how many there are."""
    labels = label_tensors(train, attrs)
    code, k = torch.zeros(len(train.x), dtype=torch.long), 1
    for a in attrs:
        code, k = code * n_classes(train, a) + labels[a], k * n_classes(train, a)
    if k > MAX_JOINT_CLASSES:
        verb = "suppress" if role == "suppressed" else "preserve"
        raise ConfigError(f"ot_repair: the {role} attributes {attrs} have {k} joint "
                          f"classes (> {MAX_JOINT_CLASSES}); {verb} fewer attributes at once")  # fmt: skip
    return code, k


def classes_present(y: torch.Tensor, k: int) -> int:
    """How many of the ``k`` classes of ``y`` have fit rows (at least 1)."""
    return max(int((torch.bincount(y, minlength=k) > 0).sum()), 1)


def fit_predictor(x: torch.Tensor, y: torch.Tensor, k: int, p: RepairParams,
                  seed: int) -> tuple[nn.Linear, nn.Linear | None]:  # fmt: skip
    """The class predictor's layers (:func:`mass.modifiers.sliced_repair.class_predictor`),
    initialised from ``seed`` and trained on ``x``, ``y`` (cross-entropy, Adam); a class with
    fewer than ``min_class_rows`` rows is masked off (never predicted)."""
    torch.manual_seed(seed)  # the initial weights: reproducible fits
    pred_in, pred_out = class_predictor(x.shape[1], k, p.hidden)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layers = [pred_in] if pred_out is None else [pred_in, pred_out]
    params = [q for layer in layers for q in layer.parameters()]
    opt = torch.optim.Adam(params, lr=1e-2 if p.hidden == 0 else 2e-3, weight_decay=1e-5)
    for _ in range(p.predictor_epochs):
        for idx in batches(len(x), 256, gen):
            opt.zero_grad()
            F.cross_entropy(predictor_logits((pred_in, pred_out), x[idx]), y[idx]).backward()
            opt.step()
    rare = torch.bincount(y, minlength=k) < p.min_class_rows
    last = pred_out if pred_out is not None else pred_in
    with torch.no_grad():
        last.bias[rare] = -1e9  # never predicted
    return pred_in, pred_out


def linear_class_predictor(z: np.ndarray, r: np.ndarray, k: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(weight [k, dim], bias [k]) of a multinomial logistic regression of ``r`` on ``z``;
    a class absent from ``r`` gets bias -1e9 (never predicted)."""
    from sklearn.linear_model import LogisticRegression

    weight, bias = torch.zeros(k, z.shape[1]), torch.full((k,), -1e9)
    seen = torch.as_tensor(np.unique(r))
    if len(seen) == 1:
        bias[seen] = 0.0
        return weight, bias
    lr = LogisticRegression(max_iter=1000).fit(z, r)
    coef, icpt = lr.coef_, lr.intercept_
    if len(seen) == 2:  # sklearn's binary form: one logit for the second class
        coef, icpt = np.vstack([np.zeros_like(coef), coef]), np.r_[0.0, icpt]
    weight[seen], bias[seen] = torch.from_numpy(coef).float(), torch.from_numpy(icpt).float()
    return weight, bias
