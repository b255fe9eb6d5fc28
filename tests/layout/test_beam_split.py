"""The package names say what is Beam: ``transforms`` holds only Beam steps (DoFns,
PTransforms, model handlers), and their Beam-free work lives in the ``mass`` core
(``mass.batches``, ``mass.release``, ``mass.serving``), which never imports Beam
(docs/architecture.md, 'Beam and not Beam')."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402

BEAM_STEPS = "transforms"
BEAM_PACKAGES = ("transforms", "beam_pipelines")


def _uses_beam(module: str) -> bool:
    return any(name.split(".")[0] == "apache_beam" for name, _, _ in g.imported_names(module))


def _only_a_docstring(module: str) -> bool:
    body = ast.parse(g.module_file(module).read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def beam_free_steps(modules: list[str]) -> list[str]:
    return [m for m in modules if not _only_a_docstring(m) and not _uses_beam(m)]


def beam_outside(modules: list[str]) -> list[str]:
    """Modules outside the Beam packages that import Beam (the commands that launch a job may,
    lazily: tests/layout/test_layers.py)."""
    return [
        f"{m}:{line}"
        for m in modules
        if m.split(".")[0] not in BEAM_PACKAGES
        for name, lazy, line in g.imported_names(m)
        if name.split(".")[0] == "apache_beam"
        and not (lazy and (m.startswith("mass.commands.") or m == "mass.cli"))
    ]


def test_every_module_of_the_beam_steps_package_uses_beam():
    modules = g.all_modules(BEAM_STEPS)
    assert len(modules) > 3
    assert beam_free_steps(modules) == [], (
        "these modules of transforms/ import no apache_beam: move them to the mass core "
        "(mass/batches, mass/release, mass/serving; docs/architecture.md)"
    )


def test_no_module_outside_the_beam_packages_imports_beam():
    modules = [m for top in g.PACKAGES if top != "bench" for m in g.all_modules(top)]
    assert "mass.release.commit" in modules and "mass.batches.spill" in modules
    assert beam_outside(modules) == []


def test_the_checks_catch_a_misplaced_module(tmp_path, monkeypatch):
    """A Beam-free module in transforms/ and a Beam import in the core are both reported."""
    (tmp_path / "transforms").mkdir()
    (tmp_path / "transforms" / "plain.py").write_text("import pyarrow as pa\n")
    (tmp_path / "transforms" / "step.py").write_text("import apache_beam as beam\n")
    (tmp_path / "mass").mkdir()
    (tmp_path / "mass" / "leak.py").write_text("def f():\n    from apache_beam import Map\n")
    monkeypatch.setattr(g, "ROOT", tmp_path)
    g._visit.cache_clear()
    try:
        assert beam_free_steps(["transforms.plain", "transforms.step"]) == ["transforms.plain"]
        assert beam_outside(["mass.leak", "transforms.step"]) == ["mass.leak:2"]
    finally:
        g._visit.cache_clear()
