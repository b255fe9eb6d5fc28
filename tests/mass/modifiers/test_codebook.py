"""codebook: the nearest centre, and with ``classes`` the nearest centre of the predicted class."""

from __future__ import annotations

import pytest
import torch

from mass.modifiers import load_modifier, save_modifier
from mass.modifiers.codebook import CodebookModifier, CodebookSpec


def _stratified() -> CodebookModifier:
    centres = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # class = sign of the second coordinate: weight rows give logits (-y, +y)
    weight, bias = torch.tensor([[0.0, -1.0], [0.0, 1.0]]), torch.zeros(2)
    spec = CodebookSpec(dim=2, cells=3, classes=2)
    return CodebookModifier(spec).set(centres, torch.tensor([0, 0, 1]), weight, bias).eval()


def test_a_row_gets_the_nearest_centre_of_its_predicted_class_not_the_nearest_overall(tmp_path):
    book = _stratified()
    x = torch.tensor([[0.9, 0.1], [0.9, -0.1], [0.1, -0.2]])
    # row 0 is nearest to centre 1 but its class (y > 0) owns centre 2 only
    expect = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    with torch.no_grad():
        assert torch.equal(book(x), expect)
    save_modifier(book, str(tmp_path / "m.pt"), method="ot_repair")
    back = load_modifier(str(tmp_path / "m.pt"))
    assert back.spec == book.spec
    with torch.no_grad():
        assert torch.equal(back(x), expect)


def test_a_plain_codebook_ignores_classes_and_a_stratified_one_needs_its_predictor():
    plain = CodebookModifier(CodebookSpec(dim=2, cells=2)).set(torch.eye(2)).eval()
    with torch.no_grad():
        assert torch.equal(plain(torch.tensor([[0.2, 0.9]])), torch.tensor([[0.0, 1.0]]))
    assert CodebookModifier.spec_from_dict({"dim": 2, "cells": 2}).classes == 0
    with pytest.raises(ValueError, match="centre_class"):
        CodebookModifier(CodebookSpec(dim=2, cells=2, classes=2)).set(torch.eye(2))
