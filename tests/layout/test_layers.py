"""The dependency rules of docs/architecture.md, checked on the source and on a real import.

mass (core) -> transforms -> beam_pipelines -> mass.commands; bench and tests sit outside and
nothing in the library imports them. The `mass` core never imports Beam: only the command
modules that launch a pipeline may, lazily (inside the function that launches it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402

PIPELINE = ("apache_beam", "transforms", "beam_pipelines")
OUTSIDE = ("bench", "tests")


def _top(name: str) -> str:
    return name.split(".")[0]


def _is_command(module: str) -> bool:
    return module.startswith("mass.commands.") or module == "mass.cli"


def _violations(modules, forbidden, *, lazy_allowed: bool = False) -> list[str]:
    return [
        f"{m}:{line} imports {name}"
        for m in modules
        for name, lazy, line in g.imported_names(m)
        if _top(name) in forbidden and not (lazy and lazy_allowed)
    ]


def test_mass_core_never_imports_beam_transforms_pipelines_or_bench():
    core = [m for m in g.all_modules("mass") if not _is_command(m)]
    assert core, "no mass modules found"
    assert _violations(core, PIPELINE + OUTSIDE) == []


def test_commands_import_pipelines_only_lazily_and_never_bench():
    commands = [m for m in g.all_modules("mass") if _is_command(m)]
    assert "mass.cli" in commands and len(commands) > 5
    assert _violations(commands, PIPELINE, lazy_allowed=True) == []
    assert _violations(commands, OUTSIDE) == []


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("transforms", ("beam_pipelines", *OUTSIDE)), ("beam_pipelines", OUTSIDE)],
)
def test_lower_layers_never_import_upper_ones(package, forbidden):
    modules = g.all_modules(package)
    assert modules
    bad = _violations(modules, forbidden)
    bad += [
        f"{m}:{e.line} imports {e.target}"
        for m in modules
        for e in g.edges(m)
        if _is_command(e.target)
    ]
    assert bad == []


def test_a_package_importing_its_members_by_name_reaches_its_subpackages():
    """``mass.methods`` registers its methods through ``pkgutil.iter_modules``, which lists
    subpackages too (``ot_repair`` is one): their modules are in the graph (DVC deps, layers)."""
    targets = {e.target for e in g.edges("mass.methods")}
    assert {"mass.methods.leace", "mass.methods.ot_repair"} <= targets
    assert "mass.methods.ot_repair.transport" in g.closure(["mass.methods"])


def test_no_import_cycle_between_first_party_modules():
    """Lazy imports included (a cycle through a function-level import is still a cycle); a
    package's ``__init__`` and its own submodules are one unit."""
    modules = [m for p in g.PACKAGES if p != "bench" for m in g.all_modules(p)]
    graph = {
        m: {
            e.target
            for e in g.edges(m)
            if e.how == "import" and not m.startswith(e.target + ".")  # child -> own package
        }
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in modules:
        if m not in index:
            visit(m)
    assert cycles == []


def test_importing_every_mass_module_loads_no_beam():
    """The same rule, measured: a fresh interpreter imports every module of ``mass`` (commands
    included: they import pipelines only when run) and Beam is not in ``sys.modules``.
    Modules needing what only exists inside Triton's python stub are reported as skipped."""
    code = f"""
import importlib, json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "tools")!r})
import import_graph as g
skipped = []
for m in g.all_modules("mass"):
    try:
        importlib.import_module(m)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in g.PACKAGES:
            raise
        skipped.append([m, e.name])
loaded = sorted(k for k in sys.modules if k.split(".")[0] in {PIPELINE + OUTSIDE!r})
print(json.dumps({{"loaded": loaded, "skipped": skipped}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=g.ROOT, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    # only the Triton stub's own module may be missing here (it exists inside tritonserver)
    assert {name for _, name in out["skipped"]} <= {"triton_python_backend_utils"}


def test_the_release_wing_is_one_way():
    """mass.release (what a release is and how it is committed) sits above the jobs' record-
    batch steps: mass.batches never imports it, and the ground-floor names (mass.formats) and
    every module below the release wing import nothing of it either."""
    batches = [m for m in g.all_modules("mass") if m.startswith("mass.batches.")]
    assert len(batches) > 5
    up = [f"{m}:{line} imports {name}" for m in batches for name, _, line in g.imported_names(m)
          if name == "mass.release" or name.startswith("mass.release.")]  # fmt: skip
    assert up == []
    names = [name for name, _, _ in g.imported_names("mass.formats")]
    assert all(n in ("mass", "mass.fs") or not n.startswith("mass") for n in names), names
