"""tests/ mirrors the packages: ``tests/<package>/<sub>/`` holds the tests of the package
``<package>/<sub>/`` and exists only where that package does (``tests/mass/audit/`` for
``mass/audit/``); tests of a top-level module ``mass/x.py`` sit in ``tests/mass/``.

Suites organised by concern sit beside the mirrors (``tests/failclosed/``, ``tests/layout/``,
``tests/mutation/``), never inside one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402

TESTS = g.ROOT / "tests"


def _skipped(path: Path) -> bool:
    return any(part.startswith((".", "__pycache__")) for part in path.parts)


def unmirrored(tests: Path, root: Path, packages: tuple[str, ...]) -> list[str]:
    """Each folder under ``tests/<package>/`` (holding files) that names no package."""
    out = []
    for package in packages:
        for folder in sorted(p for p in (tests / package).rglob("*") if p.is_dir()):
            rel = folder.relative_to(tests)
            if _skipped(rel) or not any(f.is_file() for f in folder.iterdir()):
                continue
            if not (root / rel / "__init__.py").is_file():
                out.append(f"tests/{rel}/: no package {rel}/ (move its tests beside the module)")
    return out


def test_every_test_folder_mirrors_a_package():
    assert (TESTS / "mass" / "audit").is_dir()
    assert unmirrored(TESTS, g.ROOT, g.PACKAGES) == []


def test_the_rule_sees_a_folder_named_after_a_concern(tmp_path):
    (tmp_path / "mass" / "audit").mkdir(parents=True)
    (tmp_path / "mass" / "audit" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for folder in ("audit", "audit_rules"):
        (tests / "mass" / folder).mkdir(parents=True)
        (tests / "mass" / folder / "test_x.py").write_text("")
    assert unmirrored(tests, tmp_path, ("mass",)) == [
        "tests/mass/audit_rules/: no package mass/audit_rules/ (move its tests beside the module)"
    ]
