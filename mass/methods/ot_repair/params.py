"""``ot_repair``'s knobs and every rule that ties one knob to another, in one place.

:func:`check_knobs` is the one function that validates a :class:`RepairParams` beyond each
knob's own bounds and choices (which :class:`mass.methods.base.Params` checks); it raises a
ConfigError naming the knob. Rules that depend on the data (classes with too few rows) are
the fit's (:mod:`mass.methods.ot_repair.method`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mass.errors import ConfigError
from mass.methods.base import Params, knob


@dataclass(frozen=True)
class RepairParams(Params):
    steps: int = knob(30, lo=1, help="K: random rotations of the sliced transport")
    knots: int = knob(33, lo=3, help="Q: quantile levels per coordinate (0 and 1 included)")
    hidden: int = knob(64, lo=0, help="class predictor: 0 = linear, else one ReLU layer this wide")
    passes: int = knob(1, lo=1, help="predict-and-repair passes, each on the previous output")
    predictor_epochs: int = knob(40, lo=1, help="epochs of the class predictor")
    min_class_rows: int = knob(20, lo=2, help="a class with fewer training rows is never "
                               "predicted: its rows are moved with the predicted class's map")  # fmt: skip
    informed: bool = knob(
        True,
        help="every other step's basis: eigenvectors of the class "
        "mean and covariance differences (faster), else all random",
    )
    pre_leace: bool = knob(False, help="erase the linear information first (LEACE, chained)")
    renormalize: bool = knob(True, help="L2-normalise the output (the release's unit norm)")
    cell_rows: int = knob(0, lo=0, help="0: off (unless cell_count); else release each row "
                          "as the nearest of M = n / (cell_rows * classes) k-means centres of the repaired "
                          "fit rows (about cell_rows rows of each class per cell), so what "
                          "is finer than a cell is not released (kind cells)")  # fmt: skip
    cells_by_preserved: bool = knob(False, help="with cells: centres within each class of "
                                    "the preserved attributes' joint label, the class read "
                                    "from the repaired row by a linear predictor")  # fmt: skip
    cell_axes: int = knob(0, lo=0, help="with cell_rows: 0 = k-means cells (kind cells); "
                          "m >= 1 = rank cells: bins along the top m principal axes of the "
                          "repaired rows (within each preserved class with "
                          "cells_by_preserved), edges per predicted suppressed class, "
                          "about cell_rows rows of each class per cell")  # fmt: skip
    cell_edges: str = knob("class", choices=("class", "common"), help="rank cells: "
                           "'common' = one partition per group, the same bin edges for every "
                           "suppressed class (a row's cell never depends on S); 'class' = "
                           "edges per predicted suppressed class (older specs)")  # fmt: skip
    cell_basis: str = knob("pca", choices=("pca", "within_s"), help="rank cells' axes: the "
                           "group's principal axes, or those of its covariance within the "
                           "suppressed classes (where the rows vary for reasons other than S)")  # fmt: skip
    cell_prior_rows: int = knob(30, lo=0, help="rank cells: a class with n fit rows in a "
                                "group takes n / (n + this) of its own bin edges and the rest "
                                "of the group's common edges (0: its own only)")  # fmt: skip
    cell_count: int = knob(0, lo=0, help="0 = cells from cell_rows; else about this many "
                           "cells in all: rank cells take floor((cell_count / groups) ** (1 / "
                           "cell_axes)) levels per axis (at least 2), never more cells than "
                           "this, k-means cells (cell_axes "
                           "0) this many centres, shared among the groups by their fit rows: "
                           "e.g. the cells a release of n rows can certify "
                           "(mass.metrics.certificate.cells_allowed)")  # fmt: skip
    cell_centre: str = knob("mean", choices=("mean", "median"), help="the vector every row "
                            "of a cell is released as: the mean of the cell's repaired fit "
                            "rows, or their coordinate-wise median (FARE's choice: a binary "
                            "column keeps the cell's majority value, which a reader fitted on "
                            "the original rows can read); unit-normalised when the output is")  # fmt: skip
    cell_value: str = knob("repaired", choices=("repaired", "source"), help="what a cell's "
                           "released vector is made of: its repaired fit rows (cell_centre), "
                           "or 'source': the mean of its fit rows as they came in, each "
                           "suppressed class weighted by its share of all fit rows (so a "
                           "reader fitted on the original rows reads the cell as the rows it "
                           "holds look, S averaged out); rows released alike stay alike")  # fmt: skip
    cell_resolution_rows: int = knob(0, lo=0, help="with cell_rows: 0 = the cell count "
                                     "follows the fit's own rows; else it is the count a fit "
                                     "on this many training rows gets (a fit on part of the "
                                     "rows at a larger fit's resolution; calibration does not "
                                     "set it: docs/calibration.md)")  # fmt: skip
    cell_balance: float = knob(0.0, lo=0.0, help="rank cells: 0 = off; else this fraction "
                               "of the training rows (per preserved class and suppressed "
                               "class, seeded) is held out of the fit, released through the "
                               "fitted chain, and neighbouring cells merge until every "
                               "cluster's held-out S counts match its group's (FARE)")  # fmt: skip
    cell_balance_rows: int = knob(30, lo=1, help="cell_balance: the fewest held-out rows a "
                                  "cluster of cells may hold")  # fmt: skip
    transductive: bool = knob(False, help="the training rows ARE the release: the modifier "
                              "records their ids' digest and the anonymize job refuses any "
                              "other input (mass.fitrows)")  # fmt: skip


def check_knobs(p: RepairParams) -> None:
    """Refuse knob combinations the fit cannot honour, naming the knob (ConfigError)."""
    if p.cell_axes and not (p.cell_rows or p.cell_count):
        raise ConfigError("ot_repair: cell_axes needs cell_rows (rows per cell) or "
                          "cell_count (cells in all) > 0")  # fmt: skip
    if p.cell_balance and not (p.cell_axes and p.cell_balance < 1):
        raise ConfigError(f"ot_repair: cell_balance={p.cell_balance} needs rank cells "
                          "(cell_axes > 0) and a held-out fraction below 1")  # fmt: skip
    if p.cell_centre != "mean" and not (p.cell_rows or p.cell_count):
        raise ConfigError(f"ot_repair: cell_centre={p.cell_centre} needs cells (cell_rows or "
                          "cell_count > 0): without them every row is released as repaired")  # fmt: skip
    if p.cell_resolution_rows and not p.cell_rows:
        raise ConfigError(f"ot_repair: cell_resolution_rows={p.cell_resolution_rows} needs "
                          "cell_rows > 0 (a cell_count is a count already)")  # fmt: skip
    if p.cell_value != "repaired" and not (p.cell_rows or p.cell_count):
        raise ConfigError(f"ot_repair: cell_value={p.cell_value} needs cells (cell_rows or "
                          "cell_count > 0): without them every row is released as repaired")  # fmt: skip
