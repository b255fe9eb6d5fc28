"""One frozen plan per job (issue 25): the parsed flags are read once, into the job's plan,
and nothing writes to them; the job and command functions fit a screen.

A parsed-args object, per function: a parameter named ``args`` or annotated
``argparse.Namespace``, or a name bound to (the first element of) a call of a ``parse_*``
function (``parse_args``, ``parse_known_args``, ``parse_job_argv``, ``parse_command``, ...)
or of ``argparse.Namespace(...)``. A write: an assignment (plain, augmented,
annotated, or a loop/with target) to one of its attributes, ``setattr``/``delattr`` on it, or
a write through its ``__dict__`` / ``vars()``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as g  # noqa: E402

WRITE_FREE = ("mass", "transforms", "beam_pipelines")
SHORT = ("beam_pipelines", "mass/commands")
MAX_LINES = 100


def _is_namespace(node: ast.AST | None) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return text in ("argparse.Namespace", "Namespace", "'argparse.Namespace'")


def _parsed_from(value: ast.AST) -> bool:
    """``x.parse_args(...)``, ``parse_job_argv(...)[0]``, ``argparse.Namespace(...)``."""
    if isinstance(value, ast.Subscript):
        value = value.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name.startswith("parse_") or _is_namespace(func)


def _parsed_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    names = {p.arg for p in params if p.arg == "args" or _is_namespace(p.annotation)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and _parsed_from(node.value):
            for t in node.targets:
                first = t.elts[0] if isinstance(t, ast.Tuple) and t.elts else t
                if isinstance(first, ast.Name):
                    names.add(first.id)
    return names


def _writes(fn: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> list[tuple[int, str]]:
    def on_parsed(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in names

    found = []
    for node in ast.walk(fn):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and on_parsed(sub.value):
                    found.append((sub.lineno, ast.unparse(sub)))
                if isinstance(sub, ast.Subscript) and _dict_of_parsed(sub.value, on_parsed):
                    found.append((sub.lineno, ast.unparse(sub)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("setattr", "delattr"):
            if node.args and on_parsed(node.args[0]):
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("update", "setdefault", "pop", "__setitem__"):
                if _dict_of_parsed(node.func.value, on_parsed):
                    found.append((node.lineno, ast.unparse(node)))
    return found


def _dict_of_parsed(node: ast.AST, on_parsed) -> bool:
    """``args.__dict__`` or ``vars(args)``."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return on_parsed(node.value)
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "vars" and node.args:
        return on_parsed(node.args[0])
    return False


def args_writes(source: str, where: str = "<src>") -> list[str]:
    out = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = _parsed_names(fn)
            out += [f"{where}:{line} {fn.name}: {text}" for line, text in _writes(fn, names)]
    return sorted(set(out))


def _files(packages) -> list[Path]:
    return [g.module_file(m) for p in packages for m in g.all_modules(p)]


def test_nothing_writes_to_the_parsed_args():
    files = _files(WRITE_FREE)
    assert len(files) > 50
    found = [w for f in files for w in args_writes(f.read_text(), str(f.relative_to(g.ROOT)))]
    assert found == [], "build the job's plan from the parsed flags instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "def run(args):\n    args._stage = 1\n",
        "def run(args):\n    args.x += 1\n",
        "def run(ns: argparse.Namespace):\n    setattr(ns, 'x', 1)\n",
        "def main(p):\n    a, extra = p.parse_known_args()\n    a._extra = extra\n",
        "def run(argv):\n    a, beam = parse_job_argv(parser, argv)\n    a.beam = beam\n",
        "def main(p):\n    a = p.parse_args()\n    vars(a)['x'] = 1\n",
        "def main(p):\n    a = p.parse_args()\n    a.__dict__.update(x=1)\n",
    ],
)
def test_the_check_sees_each_kind_of_write(code):
    assert args_writes(code), code


def test_the_check_leaves_reads_and_other_objects_alone():
    code = "def run(args, job):\n    job.x = args.x\n    y = args.y\n    print(args.z)\n"
    assert args_writes(code) == []


def test_job_and_command_functions_fit_a_screen():
    long = []
    for f in _files(SHORT):
        for fn in ast.walk(ast.parse(f.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = fn.end_lineno - fn.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{f.relative_to(g.ROOT)}:{fn.lineno} {fn.name}: {lines} lines")
    assert long == [], f"functions over {MAX_LINES} lines: split them\n" + "\n".join(long)
