"""dvc.yaml's code deps are true: every first-party module a stage's command can import is
under one of the stage's deps, so editing it makes `dvc status` report the stage changed.

For each stage command (``mass SUB`` -> mass/cli.py and the module ``mass.cli.COMMANDS[SUB]``;
``python FILE.py``; ``python -m MODULE``) the test walks the static import closure
(tests/layout/import_graph.py: lazy imports, packages importing their own submodules, module
names in strings) and fails naming each module no dep covers and the chain that reaches it.
A stage that serves a Triton repository produced by another stage (``--repository DIR`` and a
dep under DIR that is that stage's out) also runs the adapters written into it: the modules
named in strings in the producing stage's closure, and theirs.
Nothing here lists modules or stages: it reads dvc.yaml and the code.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import import_graph as g  # noqa: E402

DVC = g.ROOT / "dvc.yaml"


def _stages() -> dict[str, dict]:
    doc = yaml.safe_load(DVC.read_text())
    out = {}
    for name, stage in doc["stages"].items():
        out[name] = stage.get("do", stage)  # foreach stages: the template's deps and cmd
    return out


def _deps(stage: dict) -> list[str]:
    return [
        str(next(iter(d)) if isinstance(d, dict) else d).rstrip("/") for d in stage.get("deps", [])
    ]


def _outs(stage: dict) -> list[str]:
    return [
        str(next(iter(o)) if isinstance(o, dict) else o).rstrip("/") for o in stage.get("outs", [])
    ]


def _commands(stage: dict) -> list[list[str]]:
    cmds = stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]
    out = []
    for cmd in cmds:
        for part in cmd.replace(";", "&&").split("&&"):
            tokens = shlex.split(part)
            if tokens:
                out.append(tokens)
    return out


def _cli_commands() -> dict[str, str]:
    from mass.cli import COMMANDS

    return COMMANDS


def _starts(tokens: list[str]) -> list[str]:
    """The first-party modules a command line runs first ([] for mkdir, cp, ...)."""
    prog = Path(tokens[0]).name
    if prog == "mass":
        sub = next((t for t in tokens[1:] if not t.startswith("-")), None)
        cmds = _cli_commands()
        assert sub in cmds, f"`{' '.join(tokens)}`: mass has no subcommand {sub!r}"
        return ["mass.cli", cmds[sub]]
    if prog.startswith("python"):
        if "-m" in tokens:
            return [tokens[tokens.index("-m") + 1]]
        script = next((t for t in tokens[1:] if t.endswith(".py")), None)
        return [g.module_name(g.ROOT / script)] if script else []
    return []


def _closure(stage: dict) -> dict:
    starts = [m for tokens in _commands(stage) for m in _starts(tokens)]
    # the CLI names every command in strings; a stage runs only its own
    return g.closure(starts, skip_edges_of=frozenset({"mass.cli"}))


def _served(stage: dict, stages: dict[str, dict]) -> list[str]:
    """Adapter modules that Triton imports from repositories this stage serves."""
    repos = [
        t[i + 1] for t in _commands(stage) for i, a in enumerate(t[:-1]) if a == "--repository"
    ]
    served = []
    for dep in _deps(stage):
        if not any(dep == r or dep.startswith(r.rstrip("/") + "/") for r in repos):
            continue
        for other in stages.values():
            if other is not stage and dep in _outs(other):
                seen = _closure(other)
                served += [e.target for m in seen if m != "mass.cli"  # names every command
                           for e in g.edges(m) if e.how == "string"]  # fmt: skip
    return served


def _file(module: str) -> str:
    return str(g.module_file(module).relative_to(g.ROOT))


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d + "/") for d in deps)


STAGES = _stages()


def _runs(stage: dict) -> dict:
    """Every first-party module the stage can run -> its importer (its command's closure and
    the adapters of the repositories it serves)."""
    seen = _closure(stage)
    served = _served(stage, STAGES)
    if served:
        extra = g.closure(served)
        seen.update({m: p for m, p in extra.items() if m not in seen})
    return seen


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_deps_cover_every_module_its_command_can_import(name):
    stage = STAGES[name]
    seen = _runs(stage)
    served = _served(stage, STAGES)
    assert any(m.startswith("mass.commands.") or m in served for m in seen) or not any(
        _starts(t) for t in _commands(stage)
    )
    deps = _deps(stage)
    missing = sorted(
        f"{_file(m)}  ({g.chain(seen, m)})" for m in seen if not _covered(_file(m), deps)
    )
    assert not missing, (
        f"dvc.yaml stage {name!r}: its command can import these modules but no dep covers "
        "them (add the file or a directory holding it to the stage's deps):\n  "
        + "\n  ".join(missing)
    )


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_code_deps_exist(name):
    """A dep naming code that moved away would make `dvc repro` fail on a missing dep."""
    code = [d for d in _deps(STAGES[name]) if d.split("/")[0] in g.PACKAGES]
    assert [d for d in code if not (g.ROOT / d).exists()] == []


def test_the_closure_follows_lazy_imports_and_served_adapters():
    """The walk itself: `mass anonymize` reaches the keyed-noise module (the issue's example:
    editing it changes release bytes) and, through the served repository, the modifier's
    Triton adapter; `mass prepare` reaches neither."""
    anonymize = next(s for s in STAGES.values() if any(
        [Path(t[0]).name, t[1]] == ["mass", "anonymize"] for t in _commands(s)))  # fmt: skip
    seen = _closure(anonymize)
    assert "mass.noise" in seen and "beam_pipelines.anonymize" in seen
    served = _served(anonymize, STAGES)
    assert any("TritonPythonModel" in g.module_file(m).read_text() for m in served), served
    prepare = next(s for s in STAGES.values() if any(
        [Path(t[0]).name, t[1]] == ["mass", "prepare"] for t in _commands(s)))  # fmt: skip
    assert "mass.noise" not in _closure(prepare) and _served(prepare, STAGES) == []


def suggest(name: str) -> list[str]:
    """The smallest code deps for a stage: a directory when all its modules run, else files."""
    files = {_file(m) for m in _runs(STAGES[name])}
    out: set[str] = set()
    for f in sorted(files):
        best = f
        parts = Path(f).parts
        for i in range(1, len(parts)):
            d = Path(*parts[:i])
            if all(str(p.relative_to(g.ROOT)) in files for p in (g.ROOT / d).rglob("*.py")
                   if "__pycache__" not in p.parts):  # fmt: skip
                best = str(d)
                break
        out.add(best)
    return sorted(out)


def rewrite_deps(text: str) -> str:
    """dvc.yaml's text with each stage's code deps replaced by :func:`suggest` (data deps,
    their order and every kept line's comment stay; a code directory already listed whole,
    such as ``transforms``, is kept instead of its files)."""
    import re

    for name in STAGES:
        m = re.search(rf"\n  {name}:\n(.*?)(?=\n  \w|\Z)", text, re.S)
        body = m.group(1)
        d = re.search(r"( +)deps:\n((?:\1  - .*\n)+)", body)
        pad = d.group(1) + "  - "
        old = {ln.strip()[2:].split("  #")[0].strip(): ln for ln in d.group(2).splitlines()}
        data = [ln for dep, ln in old.items() if dep.split("/")[0] not in g.PACKAGES]
        code = suggest(name)
        whole = [dep for dep in old if "/" not in dep and dep in g.PACKAGES]
        code = [c for c in code if c.split("/")[0] not in whole] + whole
        lines = data + [old.get(c, pad + c) for c in code]
        body = body[: d.start(2)] + "".join(ln + "\n" for ln in lines) + body[d.end(2) :]
        text = text[: m.start(1)] + body + text[m.end(1) :]
    return text


if __name__ == "__main__":  # print each stage's code deps; --write puts them into dvc.yaml
    if "--write" in sys.argv:
        DVC.write_text(rewrite_deps(DVC.read_text()))
    for stage_name in STAGES:
        print(f"{stage_name}:")
        print("\n".join(f"  - {d}" for d in suggest(stage_name)))
