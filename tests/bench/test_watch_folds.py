"""bench/watch_folds.py: an identity release keeps all of the watch attribute under every row
order (the same reader on the same vectors), and a missing held-out folder is named."""

import numpy as np
import pytest

from bench.watch_folds import main, readings
from mass.methods._common import toy_dataset


def test_an_identity_release_reads_kept_one_under_every_order():
    ds = toy_dataset(400, dim=8, classes={"s": 2, "w": 3}, seed=1)
    x, y = np.asarray(ds.x, dtype=np.float32), ds.labels
    rows = readings(x, x.copy(), {"w": y["w"]}, {"s": y["s"]}, orders=3)
    assert [r["order"] for r in rows] == [0, 1, 2]
    assert all(r["kept"] == pytest.approx(1.0) for r in rows)


def test_a_missing_heldout_folder_is_named(tmp_path):
    from mass.errors import MissingInputError

    with pytest.raises(MissingInputError, match="none: no such file or directory"):
        main(["--heldout", str(tmp_path / "none"), "--run-dir", str(tmp_path)])
