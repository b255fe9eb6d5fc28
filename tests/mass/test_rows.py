"""Row-wise primitives (mass.rows): the plug-in entropy by hand, and the joint codes it is
used with (H(r | s) = H(r, s) - H(s) in mass.config.conditional_entropy)."""

import numpy as np
import pytest

from mass.rows import entropy_bits, joint_codes


def test_entropy_bits_by_hand():
    assert entropy_bits(np.zeros(5)) == 0.0 and entropy_bits([]) == 0.0
    assert entropy_bits([0, 1, 2, 3]) == pytest.approx(2.0)
    # 3/4, 1/4: -(0.75 log2 0.75 + 0.25 log2 0.25) = 0.811278
    assert entropy_bits(["a", "a", "a", "b"]) == pytest.approx(0.811278, abs=1e-6)
    # any values, any shape: only the counts matter
    assert entropy_bits(np.array([[7, 7], [9, 9]])) == pytest.approx(1.0)


def test_joint_codes_name_each_combination_once():
    labels = {"a": np.array([0, 0, 1, 1, 0]), "b": np.array(["x", "y", "x", "y", "x"])}
    codes = joint_codes(labels)
    assert codes.tolist() == [0, 1, 2, 3, 0]
    assert entropy_bits(codes) == pytest.approx(entropy_bits(codes.astype(str)))
    assert joint_codes(labels, []).tolist() == [0] * 5
