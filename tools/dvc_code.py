"""Each DVC stage's code as one small digest file, so `dvc exp show` shows one column a stage.

    python tools/dvc_code.py [--out code]

dvc.yaml's first stage, ``code`` (``always_changed``: cheap, it runs on every `dvc repro`),
runs this. For every other stage it writes ``code/<stage>.sha256`` (``sha256sum -c`` format):
the sha256 and path of each first-party module the stage's command can import, which is the
static import closure (tools/import_graph.py: lazy imports, packages importing their own
submodules, module names in strings) of each command of the stage (``mass SUB`` ->
mass/cli.py and ``mass.cli.COMMANDS[SUB]``; ``python FILE.py``; ``python -m MODULE``); a
stage that serves a Triton repository produced by another stage (``--repository DIR`` and a
dep under DIR that is that stage's out) also runs the adapters written into it: the modules
named in strings in the producing stage's closure, and theirs.

Each stage depends on its own digest instead of its modules, so editing a module changes the
digests (and re-runs the stages) whose closure holds it, and no other. A digest is rewritten
only when its text changes. Nothing here lists modules or stages: it reads dvc.yaml and the
code (tests/layout/test_dvc_deps.py checks dvc.yaml's wiring and the digests).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import shlex
import sys
from pathlib import Path

import import_graph as g
import yaml

DVC = g.ROOT / "dvc.yaml"
STAGE = "code"  # the stage that runs this; it has no digest of its own
OUT = "code"  # its output directory (git-ignored, a DVC output)


def stages(text: str | None = None) -> dict[str, dict]:
    """dvc.yaml's stages (a ``foreach`` stage: its template's cmd and deps)."""
    doc = yaml.safe_load(DVC.read_text() if text is None else text)
    return {name: stage.get("do", stage) for name, stage in doc["stages"].items()}


def paths(stage: dict, key: str) -> list[str]:
    """The paths a stage lists under ``deps`` or ``outs`` (without their options)."""
    items = stage.get(key) or []
    return [str(next(iter(d)) if isinstance(d, dict) else d).rstrip("/") for d in items]


def commands(stage: dict) -> list[list[str]]:
    """Each command line of the stage's ``cmd`` (split at ``&&`` and ``;``), as tokens."""
    cmds = stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]
    out = []
    for cmd in cmds:
        for part in cmd.replace(";", "&&").split("&&"):
            tokens = shlex.split(part)
            if tokens:
                out.append(tokens)
    return out


def cli_commands() -> dict[str, str]:
    """``mass.cli.COMMANDS`` (subcommand -> module), read from the source, not imported."""
    tree = ast.parse(g.module_file("mass.cli").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMMANDS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError("mass/cli.py: no COMMANDS dict")


def starts(tokens: list[str]) -> list[str]:
    """The first-party modules a command line runs first ([] for mkdir, cp, ...)."""
    prog = Path(tokens[0]).name
    if prog == "mass":
        sub = next((t for t in tokens[1:] if not t.startswith("-")), None)
        cmds = cli_commands()
        if sub not in cmds:
            raise LookupError(f"`{' '.join(tokens)}`: mass has no subcommand {sub!r}")
        return ["mass.cli", cmds[sub]]
    if prog.startswith("python"):
        if "-m" in tokens:
            module = tokens[tokens.index("-m") + 1]
            first_party = module.split(".")[0] in g.PACKAGES
            if first_party and g.module_file(module) is None:
                raise LookupError(f"`{' '.join(tokens)}`: no module {module} in {g.ROOT}")
            return [module] if first_party else []
        script = next((t for t in tokens[1:] if t.endswith(".py")), None)
        if script and not (g.ROOT / script).is_file():
            raise LookupError(f"`{' '.join(tokens)}`: no file {script} in {g.ROOT}")
        return [g.module_name(g.ROOT / script)] if script else []
    return []


def command_closure(stage: dict) -> dict:
    """Every first-party module the stage's commands can import -> its importer."""
    first = [m for tokens in commands(stage) for m in starts(tokens)]
    # the CLI names every command in strings; a stage runs only its own
    return g.closure(first, skip_edges_of=frozenset({"mass.cli"}))


def served(stage: dict, all_stages: dict[str, dict]) -> list[str]:
    """Adapter modules that Triton imports from repositories this stage serves."""
    repos = [t[i + 1] for t in commands(stage) for i, a in enumerate(t[:-1]) if a == "--repository"]
    out = []
    for dep in paths(stage, "deps"):
        if not any(dep == r or dep.startswith(r.rstrip("/") + "/") for r in repos):
            continue
        for other in all_stages.values():
            if other is not stage and dep in paths(other, "outs"):
                seen = command_closure(other)
                out += [e.target for m in seen if m != "mass.cli"  # names every command
                        for e in g.edges(m) if e.how == "string"]  # fmt: skip
    return out


def runs(name: str, all_stages: dict[str, dict]) -> dict:
    """Every first-party module stage ``name`` can run -> its importer (its commands'
    closure and the adapters of the repositories it serves)."""
    stage = all_stages[name]
    seen = command_closure(stage)
    extra = served(stage, all_stages)
    if extra:
        seen.update({m: p for m, p in g.closure(extra).items() if m not in seen})
    return seen


def module_path(module: str) -> str:
    return str(g.module_file(module).relative_to(g.ROOT))


def digest_text(files: list[str], root: Path) -> str:
    """``sha256  path`` per file (sorted by path): `sha256sum -c` reads it in ``root``."""
    lines = []
    for f in sorted(set(files)):
        lines.append(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n")
    return "".join(lines)


def digests(all_stages: dict[str, dict] | None = None) -> dict[str, str]:
    """Stage name -> its digest's text, for every stage but this one's."""
    all_stages = stages() if all_stages is None else all_stages
    out = {}
    for name in all_stages:
        if name != STAGE:
            files = [module_path(m) for m in runs(name, all_stages)]
            out[name] = digest_text(files, g.ROOT)
    return out


def write_digests(out_dir: Path, texts: dict[str, str]) -> list[str]:
    """Write ``<out_dir>/<stage>.sha256`` for each text whose file differs; returns the
    stages written (a file with the same text is left as it is, mtime included)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        path = out_dir / f"{name}.sha256"
        if path.is_file() and path.read_text() == text:
            continue
        tmp = out_dir / f".{name}.sha256.tmp"
        tmp.write_text(text)
        tmp.replace(path)
        written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/dvc_code.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", default=OUT, help=f"directory of the digests (default: {OUT})")
    args = p.parse_args(argv)
    try:
        texts = digests()
    except (LookupError, OSError, yaml.YAMLError) as e:  # a stage whose code we cannot walk
        print(f"{DVC}: {e}; fix the stage's cmd (nothing written)", file=sys.stderr)
        return 2
    written = write_digests(Path(args.out), texts)
    print(f"{args.out}/: code changed for {', '.join(written)}" if written else
          f"{args.out}/: no stage's code changed")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
