"""Functions that fit a screen: no function or method of the product packages runs past
100 lines (``def`` line to last line, docstring and nested functions included).

A longer one is split into named steps (issue 25 item 5). Read with ``ast``: nothing is
imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402

MAX_LINES = 100


def long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of each function longer than ``max_lines``."""
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                length = child.end_lineno - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and length > max_lines:
                    out.append((name, child.lineno, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_no_function_runs_past_a_screen():
    modules = [m for p in g.PACKAGES for m in g.all_modules(p)]
    assert len(modules) > 100, "no modules found"
    too_long = [
        f"{g.module_file(m).relative_to(g.ROOT)}:{line} {name} is {n} lines"
        for m in modules
        for name, line, n in long_functions(g.module_file(m).read_text())
    ]
    assert too_long == [], f"split into named steps (at most {MAX_LINES} lines each)"


def test_the_rule_sees_methods_and_nested_functions():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    fits = f"def f():\n{body}\n"
    assert long_functions(fits) == []
    long = f"def f():\n{body}\n    return x0\n"
    assert long_functions(long) == [("f", 1, MAX_LINES + 1)]
    method = "class C:\n" + "\n".join("    " + line for line in long.splitlines())
    assert long_functions(method) == [("C.f", 2, MAX_LINES + 1)]
    nested = "def outer():\n" + "\n".join("    " + line for line in long.splitlines())
    assert [n for n, *_ in long_functions(nested)] == ["outer", "outer.f"]
