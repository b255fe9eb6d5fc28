"""A served modifier runs on the device its Triton instance names: no tensor made at apply time
lands on the CPU by default.

A ``KIND_GPU`` instance (``mass export --gpu-variant``) moves the modifier and its inputs to
``cuda`` (:func:`mass.serving.adapters._common.instance_device`). A tensor a modifier creates
while it runs (``torch.arange(n)`` and the like) is made on the CPU unless it names a device,
and the first operation mixing it with the inputs fails every request. That happened: the rank
cells' ``powers`` (:func:`mass.modifiers.sliced_repair.rank_cell`) failed the demo's calibrated
model on an H200 ("Expected all tensors to be on the same device", bench/device_check.py,
docs/performance.md "On a GPU"), while every CPU test passed. This machine has no GPU, and the
meta device stops earlier (``.item()``), so the rule is read from the code: in the modules a
served modifier runs, every tensor factory called outside ``__init__`` (where buffers are
registered and later moved with the module) passes ``device=``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVED = sorted((ROOT / "mass" / "modifiers").glob("*.py")) + [ROOT / "mass" / "noise.py"]
FACTORIES = {"arange", "zeros", "ones", "full", "eye", "empty", "tensor", "linspace", "rand",
             "randn", "randint"}  # fmt: skip


def misplaced(source: str) -> list[int]:
    """Lines of ``torch.<factory>(...)`` calls without ``device=`` outside ``__init__``."""
    tree = ast.parse(source)
    inits = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
             and f.name == "__init__" for n in ast.walk(f)}  # fmt: skip
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in inits:
            continue
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr in FACTORIES
                and isinstance(f.value, ast.Name) and f.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):  # fmt: skip
            lines.append(node.lineno)
    return lines


def test_every_tensor_a_served_modifier_makes_names_its_device():
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in SERVED for n in misplaced(p.read_text())]
    assert not bad, f"tensor made on the default (CPU) device at apply time: {bad}"


def test_the_rule_sees_a_factory_without_a_device_and_spares_init():
    src = (
        "import torch\n"
        "class M:\n"
        "    def __init__(self):\n"
        "        self.b = torch.zeros(3)\n"
        "    def forward(self, x):\n"
        "        p = torch.arange(3)\n"
        "        q = torch.arange(3, device=x.device)\n"
        "        return x * p * q\n"
    )
    assert misplaced(src) == [6]
