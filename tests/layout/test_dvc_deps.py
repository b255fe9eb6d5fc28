"""dvc.yaml's code deps are true: editing a first-party module a stage's command can import
makes `dvc status` report that stage changed, and no other.

Each stage depends on one digest file, ``code/<stage>.sha256``, that dvc.yaml's first stage
``code`` (``always_changed``) writes with tools/dvc_code.py: the sha256 of every module of the
stage's import closure (tools/import_graph.py: lazy imports, packages importing their own
submodules, module names in strings, the adapters of the Triton repositories it serves). The
tests check the wiring (each stage depends on its own digest and lists no module itself; the
``code`` stage runs every time and keeps its outputs) and that each digest covers exactly its
stage's closure: the set it lists is closed under the import graph (a module some listed
module can import, but missing from the digest, fails naming the chain) and holds the
stage's commands and served adapters. `python tests/layout/test_dvc_deps.py [--write]` prints
each stage's digested modules (rewrites dvc.yaml's code deps to the digests).
Nothing here lists modules or stages: it reads dvc.yaml and the code.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import dvc_code as dc  # noqa: E402
import import_graph as g  # noqa: E402

STAGES = dc.stages()
OTHERS = sorted(n for n in STAGES if n != dc.STAGE)


def _digest(name: str) -> str:
    return f"{dc.OUT}/{name}.sha256"


def _listed(text: str) -> dict[str, str]:
    """A digest's ``path -> sha256``."""
    return {ln.split("  ", 1)[1]: ln.split("  ", 1)[0] for ln in text.splitlines()}


def not_closed(modules: set[str], stage: dict) -> list[str]:
    """What a stage's digest misses: each start of its commands, each adapter it serves and
    each module a listed module can import that is not listed (with the importer)."""
    need = {m: "its command" for t in dc.commands(stage) for m in dc.starts(t)}
    need.update({m: "a served repository" for m in dc.served(stage, STAGES)})
    for m in modules:
        for e in g.edges(m):
            if not (m == "mass.cli" and e.how == "string"):  # the CLI runs only its own command
                need.setdefault(e.target, f"{m}:{e.line}")
    return sorted(f"{dc.module_path(m)}  (imported by {why})" for m, why in need.items()
                  if m not in modules)  # fmt: skip


def test_the_code_stage_runs_every_time_and_keeps_its_digests():
    code = STAGES[dc.STAGE]
    assert code.get("always_changed") is True  # else an edit would leave the digests stale
    assert [t[1:] for t in dc.commands(code)] == [["tools/dvc_code.py", "--out", dc.OUT]]
    assert code.get("deps") is None  # it reads the whole tree every time
    assert code["outs"] == [{dc.OUT: {"cache": False, "persist": True}}]  # never deleted first
    assert next(iter(STAGES)) == dc.STAGE


@pytest.mark.parametrize("name", OTHERS)
def test_each_stage_depends_on_its_own_digest_and_lists_no_module(name):
    deps = dc.paths(STAGES[name], "deps")
    assert _digest(name) in deps, f"dvc.yaml stage {name!r}: no dep {_digest(name)}"
    code = [d for d in deps if d.split("/")[0] in g.PACKAGES]
    digests = [d for d in deps if d.startswith(dc.OUT + "/")]
    assert code == [] and digests == [_digest(name)], (
        f"dvc.yaml stage {name!r}: its code is its digest alone (`python "
        "tests/layout/test_dvc_deps.py --write`)"
    )


@pytest.mark.parametrize("name", OTHERS)
def test_each_digest_covers_exactly_what_its_command_can_import(name):
    listed = _listed(dc.digests(STAGES)[name])
    modules = {g.module_name(g.ROOT / p) for p in listed}
    missing = not_closed(modules, STAGES[name])
    assert not missing, (
        f"{_digest(name)}: misses these modules its stage can import:\n  " + "\n  ".join(missing)
    )
    assert modules == set(dc.runs(name, STAGES))  # nothing else: an unrelated edit re-runs nothing
    assert all(h == dc.digest_text([p], g.ROOT).split()[0] for p, h in listed.items())


def test_a_digest_missing_a_module_fails_the_check():
    """The check above can fail: a closure that skipped one import (here anonymize's keyed
    noise, reached only through other modules) is reported with its importer."""
    stage = STAGES["anonymize"]
    modules = set(dc.runs("anonymize", STAGES)) - {"mass.noise"}
    assert [m for m in not_closed(modules, stage) if m.startswith("mass/noise.py ")]


def test_the_closure_follows_lazy_imports_and_served_adapters():
    """The walk itself: `mass anonymize` reaches the keyed-noise module (the issue's example:
    editing it changes release bytes) and, through the served repository, the modifier's
    Triton adapter; `mass prepare` reaches neither."""
    anonymize = next(s for s in STAGES.values() if any(
        [Path(t[0]).name, t[1]] == ["mass", "anonymize"] for t in dc.commands(s)))  # fmt: skip
    seen = dc.command_closure(anonymize)
    assert "mass.noise" in seen and "beam_pipelines.anonymize" in seen
    served = dc.served(anonymize, STAGES)
    assert any("TritonPythonModel" in g.module_file(m).read_text() for m in served), served
    prepare = next(s for s in STAGES.values() if any(
        [Path(t[0]).name, t[1]] == ["mass", "prepare"] for t in dc.commands(s)))  # fmt: skip
    assert "mass.noise" not in dc.command_closure(prepare) and dc.served(prepare, STAGES) == []


def test_a_digest_changes_with_its_files_and_is_written_only_then(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "b.py").write_text("B = 1\n")
    out = tmp_path / "code"
    first = {"one": dc.digest_text(["a.py"], tmp_path), "two": dc.digest_text(["b.py"], tmp_path)}
    assert dc.write_digests(out, first) == ["one", "two"]
    stamp = (out / "one.sha256").stat().st_mtime_ns
    assert dc.write_digests(out, first) == []  # same text: not rewritten, same mtime
    assert (out / "one.sha256").stat().st_mtime_ns == stamp
    (tmp_path / "b.py").write_text("B = 2\n")
    second = {"one": dc.digest_text(["a.py"], tmp_path), "two": dc.digest_text(["b.py"], tmp_path)}
    assert second["one"] == first["one"] and second["two"] != first["two"]
    assert dc.write_digests(out, second) == ["two"]
    assert (out / "two.sha256").read_text() == second["two"]


def test_the_stage_command_writes_the_digests_once(tmp_path):
    """What DVC runs (`python tools/dvc_code.py --out DIR`, a script from the repository
    root): the digests the checks above read, then, run again, nothing rewritten."""
    cmd = [sys.executable, str(g.ROOT / "tools" / "dvc_code.py"), "--out", str(tmp_path)]
    first = subprocess.run(cmd, cwd=g.ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        f"{n}.sha256": t for n, t in dc.digests(STAGES).items()
    }
    again = subprocess.run(cmd, cwd=g.ROOT, capture_output=True, text=True, timeout=120)
    assert again.stdout.strip() == f"{tmp_path}/: no stage's code changed", again


@pytest.mark.parametrize("cmd", ["python tools/no_such.py", "python -m mass.no_such",
                                 "mass no-such-command --out x"])  # fmt: skip
def test_a_command_whose_code_cannot_be_found_is_refused_by_name(cmd):
    with pytest.raises(LookupError, match="no (file|module|subcommand)"):
        dc.starts(cmd.split())


def test_the_stage_fails_naming_a_stage_command_it_cannot_walk(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "dvc.yaml"
    bad.write_text("stages:\n  x:\n    cmd: .venv/bin/mass no-such-command\n")
    monkeypatch.setattr(dc, "DVC", bad)
    assert dc.main(["--out", str(tmp_path / "code")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "no subcommand 'no-such-command'" in err
    assert not (tmp_path / "code").exists()  # no digest of a half-walked pipeline


def rewrite_deps(text: str) -> str:
    """dvc.yaml's text with each stage's code deps replaced by its digest (data deps, their
    order and their comments stay)."""
    for name in OTHERS:
        m = re.search(rf"\n  {name}:\n(.*?)(?=\n  \w|\Z)", text, re.S)
        body = m.group(1)
        d = re.search(r"( +)deps:\n((?:\1  - .*\n)+)", body)
        dep = d.group(1) + "  - "
        lines = [ln for ln in d.group(2).splitlines()
                 if ln.strip()[2:].split("/")[0] not in (*g.PACKAGES, dc.OUT)]  # fmt: skip
        lines.append(dep + _digest(name))
        body = body[: d.start(2)] + "".join(ln + "\n" for ln in lines) + body[d.end(2) :]
        text = text[: m.start(1)] + body + text[m.end(1) :]
    return text


if __name__ == "__main__":  # print each stage's digested modules; --write fixes dvc.yaml
    if "--write" in sys.argv:
        dc.DVC.write_text(rewrite_deps(dc.DVC.read_text()))
    for stage_name, digest in dc.digests(dc.stages()).items():
        print(f"{stage_name}:")
        print("".join(f"  - {p}\n" for p in _listed(digest)), end="")
