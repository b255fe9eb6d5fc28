"""No compatibility layers: a module imports only names it uses.

A name imported into a module and never read there is kept only so that other code can import
it from the wrong home (a re-export left behind by a move, an alias for tests): callers then
depend on a module that does not own the name, and the mutation targets, docs and DVC deps
follow the wrong file. The test reads every first-party module with ``ast`` and fails naming
each imported name that the module never reads (listing it in ``__all__`` is no use). A package's
``__init__`` may import its own submodules and their names: that is the package's public
interface (e.g. :mod:`mass.metrics`), not a layer over another module's names.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402


def _imported(tree: ast.Module, package: str | None) -> dict[str, int]:
    """name bound by an import -> line (every import, at any depth); in a package's
    ``__init__`` (``package`` given), imports from the package's own modules are skipped."""
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            own = node.level > 0 or (package and (node.module or "").startswith(package + "."))
            if node.module == "__future__" or (package and own):
                continue
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = node.lineno
    return out


def _all_entries(tree: ast.Module) -> list[ast.AST]:
    """The string constants of every ``__all__ = [...]`` / ``+=`` in the module."""
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign)
                   else [])  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            out += [c for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
    return out


def _read(tree: ast.Module) -> set[str]:
    """Names the module reads (a load anywhere, `del`, or a `global` that is then used)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Load, ast.Del))}  # fmt: skip
    # a name quoted in a string annotation ("OwnerKey | None") is a use too; a name listed in
    # ``__all__`` is not (listing a re-export there would keep it alive)
    listed = {id(c) for c in _all_entries(tree)}
    for n in ast.walk(tree):
        if id(n) in listed:
            continue
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 200:
            try:
                sub = ast.parse(n.value, mode="eval")
            except SyntaxError:
                continue
            names |= {m.id for m in ast.walk(sub) if isinstance(m, ast.Name)}
    return names


def unused_imports() -> list[str]:
    out = []
    files = [g.module_file(m) for pkg in g.PACKAGES for m in g.all_modules(pkg)]
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        read = _read(tree)
        package = g.module_name(path) if path.name == "__init__.py" else None
        for name, line in sorted(_imported(tree, package).items(), key=lambda kv: kv[1]):
            if name in read:
                continue
            out.append(f"{path.relative_to(g.ROOT)}:{line}: imports {name!r} and never reads it")
    return out


def test_no_module_reexports_names_it_does_not_use():
    found = unused_imports()
    assert not found, (
        "names imported and never used (re-exports: import them from their own module "
        "instead, then delete the import here):\n  " + "\n  ".join(found)
    )


if __name__ == "__main__":
    print("\n".join(unused_imports()) or "none")
