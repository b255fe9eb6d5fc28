"""The first-party import graph, read from the source with ``ast`` (nothing is imported).

Used by the layout tests (tests/layout/: layers, DVC deps) and by dvc.yaml's ``code`` stage
(tools/dvc_code.py: each stage's code digest). An edge ``a -> b`` means module ``a`` can import
first-party module ``b`` when it runs:

- every ``import`` / ``from ... import`` statement, at module level or inside a function
  (``lazy``: it runs only when that function does);
- a package whose ``__init__`` imports its own submodules by name at run time
  (``pkgutil.iter_modules(__path__)`` + ``importlib.import_module``) -> every submodule and
  subpackage;
- a string literal that is exactly the dotted name of a first-party module (``"mass.x.y"``):
  code that imports modules by name (adapters written into a Triton repository, registries);
  when it names a package, every module under it (``f"{PACKAGE}.{kind}"`` built at run time).

Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``: those are edges too.
Nothing here lists modules: the graph follows whatever the tree holds.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the installed library's top-level packages (pyproject's packages.find), bench/ and tools/
PACKAGES = ("mass", "transforms", "beam_pipelines", "bench", "tools")


@dataclass(frozen=True)
class Edge:
    target: str
    lazy: bool  # inside a function body (or under `if TYPE_CHECKING:`): runs on demand
    line: int
    how: str  # "import" | "package" | "string"


def module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def module_name(path: Path) -> str:
    rel = path.resolve().relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _members(package: str) -> list[str]:
    return [m for m in all_modules(package.replace(".", "/")) if m != package]


def all_modules(package: str) -> list[str]:
    """Every module of ``package`` (its files; caches and hidden directories skipped)."""
    root = ROOT / package
    return sorted(
        module_name(p)
        for p in root.rglob("*.py")
        if not any(part.startswith((".", "__pycache__")) for part in p.relative_to(ROOT).parts)
    )


def _resolve(name: str) -> str | None:
    """The longest prefix of ``name`` that is a first-party module file."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    while parts:
        if module_file(".".join(parts)) is not None:
            return ".".join(parts)
        parts.pop()
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.depth = 0
        self.edges: list[Edge] = []
        self.names: list[tuple[str, bool, int]] = []  # every absolute import: (name, lazy, line)
        self.dynamic_submodules = False

    def _add(self, name: str | None, node: ast.AST, how: str = "import") -> None:
        if name and how == "import":
            self.names.append((name, self.depth > 0, node.lineno))
        target = _resolve(name) if name else None
        if target and target != self.module:
            self.edges.append(Edge(target, self.depth > 0, node.lineno, how))

    def visit_FunctionDef(self, node):  # noqa: N802 (ast API)
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_If(self, node):  # noqa: N802
        test = ast.unparse(node.test)
        if "TYPE_CHECKING" in test:  # never runs
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
        else:
            self.generic_visit(node)

    def visit_Import(self, node):  # noqa: N802
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node):  # noqa: N802
        if node.level:
            pkg = self.module.split(".")
            pkg = pkg if self.is_package else pkg[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join([*pkg, node.module] if node.module else pkg)
        else:
            base = node.module or ""
        self._add(base, node)
        for alias in node.names:  # `from pkg import submodule`
            full = f"{base}.{alias.name}"
            if module_file(full) is not None:
                self._add(full, node)

    def visit_Constant(self, node):  # noqa: N802
        v = node.value
        if (
            isinstance(v, str)
            and "." in v
            and v.split(".")[0] in PACKAGES
            and all(part.isidentifier() for part in v.split("."))
            and module_file(v) is not None
        ):
            self._add(v, node, "string")

    def visit_Call(self, node):  # noqa: N802
        text = ast.unparse(node.func)
        if text.endswith("iter_modules") and self.is_package:
            self.dynamic_submodules = True
        self.generic_visit(node)


@functools.cache
def _visit(module: str) -> _Visitor:
    path = module_file(module)
    v = _Visitor(module, path is not None and path.name == "__init__.py")
    if path is not None:
        v.visit(ast.parse(path.read_text(), filename=str(path)))
    return v


def imported_names(module: str) -> list[tuple[str, bool, int]]:
    """Every name ``module`` imports, third-party included: ``(dotted name, lazy, line)``."""
    return list(_visit(module).names)


@functools.cache
def edges(module: str) -> tuple[Edge, ...]:
    """What ``module`` can import (first-party only), with line numbers."""
    v = _visit(module)
    path = module_file(module)
    if path is None:
        return ()
    out = list(v.edges)
    if v.dynamic_submodules:  # what pkgutil.iter_modules lists: modules and subpackages
        subs = [p for p in path.parent.glob("*.py") if p.name != "__init__.py"]
        subs += [p / "__init__.py" for p in path.parent.iterdir() if (p / "__init__.py").is_file()]
        for sub in sorted(subs):
            out.append(Edge(module_name(sub), False, 0, "package"))
    for e in [e for e in out if e.how == "string"]:  # a package named in a string: code that
        pkg = module_file(e.target)  # builds "pkg.<name>" at run time may import any member
        if pkg is not None and pkg.name == "__init__.py":
            out += [Edge(m, e.lazy, e.line, "string") for m in _members(e.target)]
    for e in list(out):  # importing a.b.c runs a/__init__ and a/b/__init__
        for parent in _parents(e.target):
            if module_file(parent) is not None and parent != module:
                out.append(Edge(parent, e.lazy, e.line, e.how))
    return tuple(out)


def closure(starts: list[str], *, skip_edges_of: frozenset[str] = frozenset()) -> dict:
    """Every first-party module reachable from ``starts`` -> the module that imports it.

    ``skip_edges_of``: modules whose own edges are not followed beyond their static imports
    of non-string kind (a dispatcher such as the CLI, which names every command in strings).
    """
    seen: dict[str, str | None] = {}
    todo = []
    for s in starts:
        for m in [*_parents(s), s]:
            if module_file(m) is not None and m not in seen:
                seen[m] = None
                todo.append(m)
    while todo:
        m = todo.pop()
        for e in edges(m):
            if m in skip_edges_of and e.how == "string":
                continue
            if e.target not in seen:
                seen[e.target] = m
                todo.append(e.target)
    return seen


def chain(seen: dict, module: str) -> str:
    """``start -> ... -> module``: how a closure reached ``module``."""
    path = [module]
    while seen.get(path[-1]):
        path.append(seen[path[-1]])
    return " -> ".join(reversed(path))
