"""Kind ``cells``: the one apply path of ot_repair's cells (issue 35, item 5). A row is
released as its cell's vector; the cell is read from the repaired row alone (its group by a
stored linear predictor, then the nearest of the group's centres, or its bin along each of
the group's axes with the group's edges), so it never depends on S."""

from __future__ import annotations

import pytest
import torch

from mass.modifiers import load_modifier, save_modifier
from mass.modifiers.cells import CellsFit, CellsModifier, CellsSpec


def _grid() -> CellsModifier:
    """Two groups (read from x0's sign), one axis of 3 levels each: x1 in group 0 (edges
    -0.5, 0.5), x2 in group 1 (edges 0, 0: its bins 0 or 2); cells 0-2 and 3-5."""
    spec = CellsSpec(dim=3, cells=6, groups=2, rule="grid", axes=1, levels=3)
    weight = torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    axes = torch.tensor([[[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]]])
    edges = torch.tensor([[[-0.5, 0.5]], [[0.0, 0.0]]])
    centres = torch.arange(18, dtype=torch.float32).view(6, 3)
    return CellsModifier.from_fit(spec, CellsFit(centres, weight, torch.zeros(2),
                                                 group_mean=torch.zeros(2, 3), axes=axes,
                                                 edges=edges))  # fmt: skip


def test_a_grid_cell_is_the_rows_bin_along_its_groups_axes_by_hand():
    mod = _grid()
    x = torch.tensor([[-1.0, -0.9, 5.0], [-1.0, 0.1, 5.0], [-1.0, 0.9, -5.0],
                      [1.0, 9.0, -0.2], [1.0, -9.0, 0.2]])  # fmt: skip
    assert mod.cell_of(x).tolist() == [0, 1, 2, 3, 5]  # group 1: cells 3 + bin
    assert torch.equal(mod(x), mod.centres[torch.tensor([0, 1, 2, 3, 5])])


def test_a_nearest_cell_is_the_nearest_centre_of_the_rows_group_by_hand():
    centres = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]])
    owner = torch.tensor([0, 0, 1])
    weight = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    bias = torch.tensor([0.0, 1.0])  # every row in group 1: only centre 2 competes
    spec = CellsSpec(dim=2, cells=3, groups=2)
    mod = CellsModifier.from_fit(spec, CellsFit(centres, weight, bias, centre_group=owner))
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert mod.cell_of(x).tolist() == [2, 2]
    one = CellsModifier.from_fit(CellsSpec(dim=2, cells=3), CellsFit(
        centres, torch.zeros(1, 2), torch.zeros(1), centre_group=torch.zeros(3, dtype=torch.long)))  # fmt: skip
    assert one.cell_of(x).tolist() == [1, 0]  # one group: every centre competes


def test_every_row_of_a_cell_is_released_as_one_vector(tmp_path):
    mod = _grid()
    x = torch.randn(500, 3)
    rel, cell = mod(x), mod.cell_of(x)
    for c in cell.unique():
        assert len(torch.unique(rel[cell == c], dim=0)) == 1
    save_modifier(mod, str(tmp_path / "m.pt"), method="ot_repair")
    back = load_modifier(str(tmp_path / "m.pt"))
    assert back.spec == mod.spec and torch.equal(back(x), rel)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (dict(dim=2, cells=4, rule="kmeans"), "rule 'kmeans'"),
        (dict(dim=2, cells=5, groups=1, rule="grid", axes=2, levels=2), "groups \\* levels"),
        (dict(dim=2, cells=2, groups=1, rule="grid", axes=1, levels=1), "levels >= 2"),
    ],
)
def test_a_spec_that_names_no_partition_is_refused(spec, needle):
    with pytest.raises(ValueError, match=needle):
        CellsSpec(**spec)


def test_a_modifier_is_built_whole_from_fitted_values_or_refused():
    """``from_fit`` is strict: a value the rule needs that is missing, or one it does not use,
    is an error, never a modifier with zero buffers."""
    spec = CellsSpec(dim=2, cells=3)
    with pytest.raises(RuntimeError, match="centre_group"):
        CellsModifier.from_fit(spec, CellsFit(torch.zeros(3, 2), torch.zeros(1, 2), torch.zeros(1)))
    with pytest.raises(RuntimeError, match="axes"):
        CellsModifier.from_fit(spec, CellsFit(torch.zeros(3, 2), torch.zeros(1, 2), torch.zeros(1),
                                              centre_group=torch.zeros(3, dtype=torch.long),
                                              axes=torch.zeros(1, 1, 2)))  # fmt: skip
