"""Table-driven fail-closed suite: every bad input or fault ends in one exact error and no
release (a previous release stays byte-identical, nothing staged is left behind).

Each case is driven through the ``mass`` command line in-process (``mass anonymize``,
``mass train``, ``mass audit``). Cases that need no server point ``--triton-url`` at a closed
port: a validation that let bad input through would reach it and fail with the wrong class.
Cases marked ``triton`` share one real server (``fc_server``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass import errors as E
from mass.embeddings import embedding_array
from mass.serving import free_port

DIM = 16


@dataclass
class Ctx:
    tmp: Path
    repo: Path  # holds `mod` and the broken models
    base: Path  # the fixture folder (repo, other, run, ...)
    url: str
    fc: object

    @property
    def out(self) -> Path:
        return self.tmp / "release"

    def input(self, name: str = "in.parquet", **columns) -> str:
        path = self.tmp / name
        self.fc.write_input(path, **columns)
        return str(path)

    def anonymize(self, src: str, *flags: str, model: str = "mod", repo=None) -> list[str]:
        return ["anonymize", "--input", src, "--output", str(self.out), "--model", model,
                "--repository", str(repo or self.repo), "--triton-url", self.url,
                "--batch-rows", "200", *flags]  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Ctx], list[str]]
    error: type
    names: tuple[str, ...]  # substrings the message must contain (file/column/row/param)
    server: bool = False
    # The pipeline ran to the end: its quarantine (bad rows + reason, possibly none) is
    # published for inspection even though the release is refused.
    quarantine: bool = False


# -- input builders ---------------------------------------------------------------------------
def _emb_rows(rows=600, dim=DIM, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)


def _with_row(fn, rows=600):
    x = _emb_rows(rows)
    fn(x)
    return embedding_array(x)


def _ragged():
    vals = [list(map(float, r)) for r in _emb_rows()]
    vals[10] = vals[10][:15]
    return pa.array(vals, pa.list_(pa.float32()))


def _null_emb():
    vals = [list(map(float, r)) for r in _emb_rows()]
    vals[12] = None
    return pa.array(vals, pa.list_(pa.float32()))


def _null_value():
    vals = [list(map(float, r)) for r in _emb_rows()]
    vals[13][2] = None
    return pa.array(vals, pa.list_(pa.float32()))


def _truncated(c: Ctx, name="in.parquet") -> str:
    path = c.input(name)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    return path


def _corrupt_page(c: Ctx) -> str:
    """Footer intact, the embedding's page header in row group 1 overwritten: only the
    pipeline's reader can find this one."""
    path = c.input()
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(1)
    col = next(i for i in range(group.num_columns)
               if group.column(i).path_in_schema.startswith("emb."))  # fmt: skip
    offset = group.column(col).data_page_offset
    data = bytearray(Path(path).read_bytes())
    data[offset : offset + 48] = b"\xff" * 48
    Path(path).write_bytes(bytes(data))
    return path


def _dir_with(c: Ctx, second: Callable[[Path], None]) -> str:
    d = c.tmp / "parts"
    d.mkdir()
    c.fc.write_input(d / "a.parquet", rows=300)
    second(d / "b.parquet")
    return str(d)


def _dup_ids():
    ids = np.arange(600, dtype=np.int64)
    ids[9] = 3
    return pa.array(ids)


def _tampered_repo(c: Ctx) -> Path:
    repo = c.fc.copy_tree(c.repo / "mod", c.tmp / "repo" / "mod").parent
    with open(repo / "mod" / "1" / "modifier.pt", "ab") as f:
        f.write(b"\0")
    return repo


def _no_export_json(c: Ctx) -> Path:
    repo = c.fc.copy_tree(c.repo / "mod", c.tmp / "repo" / "mod").parent
    os.remove(repo / "mod" / "1" / "export.json")
    return repo


def _second_version(c: Ctx) -> Path:
    repo = c.fc.copy_tree(c.repo / "mod", c.tmp / "repo" / "mod").parent
    c.fc.export_mod(c.tmp / "run2", repo, seed=2)  # version 2, never served
    return repo


def _train(c: Ctx, src: str, *flags: str) -> list[str]:
    return ["train", "--data", src, "--out", str(c.out), "--epochs", "1", "--no-progress",
            *flags]  # fmt: skip


def _audit_unseen(c: Ctx) -> list[str]:
    import torch

    from mass.branch_models import AttributeClassifier, save_branches

    run = c.tmp / "run"
    run.mkdir()
    torch.manual_seed(0)
    save_branches(str(run / "branches.pt"), {"digit": AttributeClassifier(DIM, 10)}, None)
    (run / "encodings.json").write_text(json.dumps({"digit": list(range(10))}))
    rel = c.tmp / "rel.parquet"
    c.fc.write_input(rel, digit=None, parity=None, image=None, note=None)
    digit = np.arange(600) % 10
    digit[4] = 11  # a class the run never saw
    labels = c.input("labels.parquet", digit=pa.array(digit), parity=None, image=None)
    return ["audit", "--release", str(rel), "--labels", labels, "--suppress", "digit",
            "--report", str(c.out), "--run-dir", str(run), "--no-chart"]  # fmt: skip


def _audit_single_class(c: Ctx) -> list[str]:
    rel = c.tmp / "rel.parquet"
    c.fc.write_input(rel, digit=None, parity=None, image=None, note=None)
    labels = c.input("labels.parquet", digit=pa.array(np.full(600, 3)), image=None)
    return ["audit", "--release", str(rel), "--labels", labels, "--suppress", "digit",
            "--preserve", "parity", "--report", str(c.out), "--no-chart"]  # fmt: skip


def _literal_bracket(c: Ctx) -> str:
    """``in[1].parquet`` (no id column) exists; the glob it reads as would match in1.parquet
    (a good file): the named file is the one read."""
    c.fc.write_input(c.tmp / "in1.parquet")
    return c.input("in[1].parquet", id=None)


def _only_empty_files(c: Ctx) -> str:
    d = c.tmp / "parts"
    d.mkdir()
    for name in ("a.parquet", "b.parquet"):
        c.fc.write_input(d / name, rows=0)
    return str(d)


def _spark_dir_with_only_temporary(c: Ctx) -> str:
    """Spark mid-write: the rows are still under ``_temporary/``, which is never read."""
    d = c.tmp / "spark"
    (d / "_temporary" / "0").mkdir(parents=True)
    c.fc.write_input(d / "_temporary" / "0" / "part-0.parquet")
    (d / "_SUCCESS").write_text("")
    return str(d)


def _dict_ids_dup():
    ids = [f"u{i}" for i in range(600)]
    ids[9] = "u3"
    return pa.array(ids).dictionary_encode()


def _fsl_null_cell():
    flat = pa.array(_emb_rows().ravel())
    mask = np.zeros(len(flat), bool)
    mask[13 * DIM + 2] = True
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.to_numpy(), mask=mask), DIM)


def _train_out_file(c: Ctx) -> list[str]:
    argv = _train(c, c.input(), "--suppress", "digit")
    (c.tmp / "run.txt").write_text("notes")
    argv[argv.index("--out") + 1] = str(c.tmp / "run.txt")
    return argv


def _train_out_inside_data(c: Ctx) -> list[str]:
    data = c.tmp / "data"
    data.mkdir()
    c.fc.write_input(data / "part-0.parquet")
    argv = _train(c, str(data), "--suppress", "digit")
    argv[argv.index("--out") + 1] = str(data / "run")
    return argv


def _audit_report_in_release(c: Ctx) -> list[str]:
    labels = c.input("labels.parquet", image=None)
    return ["audit", "--release", str(c.out), "--labels", labels, "--suppress", "digit",
            "--report", str(c.out / "report"), "--no-chart"]  # fmt: skip


def _audit_with_policy(c: Ctx, policy: bytes) -> list[str]:
    (c.tmp / "policy.yaml").write_bytes(policy)
    labels = c.input("labels.parquet", image=None)
    return ["audit", "--release", str(c.tmp / "rel.parquet"), "--labels", labels, "--suppress",
            "digit", "--report", str(c.out), "--params", str(c.tmp / "policy.yaml"),
            "--no-chart"]  # fmt: skip


def _nested(rows=600):
    return pa.array([[i % 10] for i in range(rows)], pa.list_(pa.int64()))


def _audit_nested(c: Ctx) -> list[str]:
    rel = c.tmp / "rel.parquet"
    c.fc.write_input(rel, digit=None, parity=None, image=None, note=None)
    labels = c.input("nested.parquet", digit=_nested(), image=None)
    return ["audit", "--release", str(rel), "--labels", labels, "--suppress", "digit",
            "--report", str(c.out), "--no-chart"]  # fmt: skip


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    argv[argv.index(flag) + 1] = value
    return argv


A = Ctx.anonymize
CASES = [
    # -- files -----------------------------------------------------------------------------
    Case("missing-file", lambda c: A(c, str(c.tmp / "nope.parquet")),
         E.MissingInputError, ("nope.parquet", "no such file")),
    Case("empty-glob", lambda c: A(c, str(c.tmp / "*.parq")),
         E.MissingInputError, ("*.parq", "matches no Parquet")),
    Case("empty-directory", lambda c: (c.tmp / "d").mkdir() or A(c, str(c.tmp / "d")),
         E.MissingInputError, ("/d:", "matches no Parquet")),
    Case("truncated-parquet", lambda c: A(c, _truncated(c)),
         E.UnreadableInputError, ("in.parquet", "truncated")),
    Case("not-parquet", lambda c: (c.tmp / "x.parquet").write_text("id,emb\n1,2\n")
         and A(c, str(c.tmp / "x.parquet")), E.UnreadableInputError, ("x.parquet",)),
    Case("truncated-second-file",
         lambda c: A(c, _dir_with(c, lambda p: p.write_bytes(b"PAR1 not really"))),
         E.UnreadableInputError, ("b.parquet",)),
    Case("corrupt-data-page", lambda c: A(c, _corrupt_page(c)),
         E.UnreadableInputError, ("in.parquet", "row group 1"), server=True),
    Case("literal-name-with-brackets", lambda c: A(c, _literal_bracket(c)),
         E.SchemaError, ("in[1].parquet", "'id'")),
    Case("only-empty-files", lambda c: A(c, _only_empty_files(c)),
         E.MissingInputError, ("parts", "holds no rows", "a.parquet")),
    Case("only-spark-temporary-files", lambda c: A(c, _spark_dir_with_only_temporary(c)),
         E.MissingInputError, ("spark", "matches no Parquet", "2 skipped")),
    # -- columns and types -----------------------------------------------------------------
    Case("missing-id-column", lambda c: A(c, c.input(id=None)),
         E.SchemaError, ("in.parquet", "'id'", "--id-col")),
    Case("missing-embedding-column", lambda c: A(c, c.input(emb=None)),
         E.SchemaError, ("in.parquet", "'emb'", "--emb-col")),
    Case("renamed-id-flag", lambda c: A(c, c.input(), "--id-col", "uid"),
         E.SchemaError, ("'uid'",)),
    Case("embedding-of-strings", lambda c: A(c, c.input(
        emb=pa.array([["a"] * DIM] * 600, pa.list_(pa.string())))),
         E.SchemaError, ("'emb'", "string")),
    Case("embedding-scalar-column", lambda c: A(c, c.input(emb=pa.array(np.ones(600)))),
         E.SchemaError, ("'emb'", "double")),
    Case("embedding-of-ints", lambda c: A(c, c.input(emb=pa.FixedSizeListArray.from_arrays(
        pa.array(np.ones(600 * DIM, np.int64)), DIM))), E.SchemaError, ("'emb'", "int64")),
    Case("dimension-differs-fixed", lambda c: A(c, c.input(emb=embedding_array(
        _emb_rows(dim=8)))), E.SchemaError, ("'emb'", "dimension 8", "expects 16")),
    Case("dimension-differs-list", lambda c: A(c, c.input(emb=pa.array(
        [[0.5] * 12] * 600, pa.list_(pa.float32())))),
         E.SchemaError, ("'emb'", "dimension 12", "row 0")),
    Case("files-disagree-on-schema", lambda c: A(c, _dir_with(c, lambda p: c.fc.write_input(
        p, rows=300, id_offset=300, emb=pa.array([[0.5] * DIM] * 300,
                                                 pa.list_(pa.float64()))))),
         E.SchemaError, ("b.parquet", "'emb'", "a.parquet")),
    Case("float-ids", lambda c: A(c, c.input(id=pa.array(np.arange(600, dtype=float)))),
         E.SchemaError, ("'id'", "double")),
    Case("internal-column-name", lambda c: A(c, c.input(__mass_input=pa.array(np.arange(600))),
                                             "--allow-columns", "__mass_input"),
         E.SchemaError, ("in.parquet", "'__mass_input'", "collides", "rename")),
    Case("id-column-named-reason", lambda c: A(c, c.input(reason=pa.array(np.arange(600))),
                                               "--id-col", "reason"),
         E.SchemaError, ("'reason'", "collides")),
    # -- ids -------------------------------------------------------------------------------
    Case("duplicate-dictionary-id", lambda c: A(c, c.input(id=_dict_ids_dup())),
         E.InvalidValueError, ("duplicate id 'u3'", "in.parquet row 3", "row 9")),
    Case("duplicate-id", lambda c: A(c, c.input(id=_dup_ids())),
         E.InvalidValueError, ("duplicate id 3", "in.parquet row 3", "row 9")),
    Case("duplicate-id-across-files", lambda c: A(c, _dir_with(
        c, lambda p: c.fc.write_input(p, rows=300, id_offset=250))),
         E.InvalidValueError, ("a.parquet row 250", "b.parquet row 0")),
    Case("null-id", lambda c: A(c, c.input(id=pa.array([*range(5), None, *range(6, 600)],
                                                      pa.int64()))),
         E.InvalidValueError, ("in.parquet", "'id'", "row 5", "null")),
    # -- allow-list ------------------------------------------------------------------------
    Case("allow-unknown-column", lambda c: A(c, c.input(), "--allow-columns", "nosuch"),
         E.SchemaError, ("'nosuch'", "--allow-columns")),
    Case("allow-suppressed-attribute", lambda c: A(c, c.input(), "--allow-columns", "digit"),
         E.ReleaseError, ("'digit'", "suppressed", "--force-allow")),
    Case("allow-raw-media-column", lambda c: A(c, c.input(), "--allow-columns", "note,image"),
         E.ReleaseError, ("'image'", "raw media")),
    Case("allow-id-column", lambda c: A(c, c.input(), "--allow-columns", "id"),
         E.ReleaseError, ("'id'", "--allow-columns")),
    # -- parameters ------------------------------------------------------------------------
    Case("zero-shards", lambda c: A(c, c.input(), "--shards", "0"),
         E.ConfigError, ("--shards",)),
    Case("zero-batch-rows", lambda c: A(c, c.input(), "--batch-rows", "0"),
         E.ConfigError, ("--batch-rows",)),
    Case("too-many-shards", lambda c: A(c, c.input(), "--shards", "1025"),
         E.ConfigError, ("--shards", "<= 1024", "1025")),
    Case("negative-threshold", lambda c: A(c, c.input(), "--max-quarantined", "-1"),
         E.ConfigError, ("--max-quarantined",)),
    # -- model files (checked before any server is contacted) ------------------------------
    Case("tampered-weights", lambda c: A(c, c.input(), repo=_tampered_repo(c)),
         E.ChecksumMismatchError, ("modifier.pt", "sha256", "re-export")),
    Case("missing-export-json", lambda c: A(c, c.input(), repo=_no_export_json(c)),
         E.ServingError, ("export.json", "mass export")),
    Case("server-unreachable", lambda c: A(c, c.input()),
         E.ServingError, ("unreachable", "--triton-url")),
    # -- training and audit inputs ---------------------------------------------------------
    Case("train-single-class-label", lambda c: _train(
        c, c.input(digit=pa.array(np.full(600, 3))), "--suppress", "digit"),
         E.LabelError, ("in.parquet", "'digit'", "single class")),
    Case("train-attribute-not-in-data", lambda c: _train(c, c.input(), "--suppress", "colour"),
         E.ConfigError, ("suppress", "'colour'")),
    Case("train-suppress-and-preserve", lambda c: _train(
        c, c.input(), "--suppress", "digit", "--preserve", "digit"),
         E.ConfigError, ("suppress/preserve", "digit")),
    Case("train-out-is-a-file", _train_out_file, E.ConfigError, ("--out", "run.txt",
                                                                  "is a file")),
    Case("train-out-inside-data", _train_out_inside_data, E.ConfigError,
         ("--out", "inside --data", "data/run")),
    Case("train-unknown-attacker", lambda c: _train(c, c.input(), "--suppress", "digit",
                                                    "--attackers", "logreg,forest"),
         E.ConfigError, ("--attackers", "'forest'", "gboost")),
    Case("train-nan-budget", lambda c: _train(c, c.input(), "--suppress", "digit",
                                              "--budget-minutes", "nan"),
         E.ConfigError, ("--budget-minutes", "nan", "positive")),
    Case("train-attribute-named-twice", lambda c: _train(c, c.input(), "--suppress",
                                                         "digit,digit"),
         E.ConfigError, ("--suppress", "'digit'", "more than once")),
    Case("train-continuous-label", lambda c: _train(c, c.input(
        digit=pa.array(np.random.default_rng(0).random(600))), "--suppress", "digit"),
         E.LabelError, ("in.parquet", "'digit'", "not whole numbers", "row 0", "bin")),
    Case("policy-not-utf8", lambda c: _audit_with_policy(c, b"# caf\xe9\naudit:\n  folds: 3\n"),
         E.ConfigError, ("policy.yaml", "not UTF-8", "--params")),
    Case("policy-suppress-as-list", lambda c: _audit_with_policy(
        c, b"audit:\n  suppress: [digit]\n"), E.ConfigError, ("audit.suppress", "expected")),
    Case("policy-seed-past-2-32", lambda c: _audit_with_policy(
        c, b"audit:\n  seed: 99999999999\n"), E.ConfigError, ("audit.seed", "4294967295")),
    Case("policy-folds-past-100", lambda c: _audit_with_policy(
        c, b"audit:\n  folds: 5000\n"), E.ConfigError, ("audit.folds", "from 2 to 100")),
    Case("train-policy-not-utf8", lambda c: (c.tmp / "p.yaml").write_bytes(b"# caf\xe9\n")
         and _train(c, c.input(), "--suppress", "digit", "--policy", str(c.tmp / "p.yaml")),
         E.ConfigError, ("p.yaml", "not UTF-8", "--policy")),
    Case("train-nested-label", lambda c: _train(c, c.input(digit=_nested()), "--suppress",
                                                "digit"),
         E.LabelError, ("in.parquet", "'digit'", "list<", "one class per row")),
    Case("audit-nested-label", lambda c: _audit_nested(c), E.LabelError,
         ("nested.parquet", "'digit'", "list<")),
    Case("train-empty-out", lambda c: _set(_train(c, c.input(), "--suppress", "digit"), "--out",
                                           ""), E.ConfigError, ("--out", "empty")),
    Case("train-empty-config", lambda c: _train(c, c.input(), "--suppress", "digit", "--config",
                                                ""), E.ConfigError, ("--config", "empty")),
    Case("audit-empty-report", lambda c: _set(_audit_with_policy(c, b"audit:\n  folds: 3\n"),
                                              "--report", ""), E.OutputPathError,
         ("--report", "empty")),
    Case("audit-report-inside-release", _audit_report_in_release, E.OutputPathError,
         ("--report", "inside --release")),
    Case("audit-unseen-class", _audit_unseen, E.LabelError, ("labels.parquet", "'digit'",
                                                              "row 4", "11")),
    Case("audit-single-class-label", _audit_single_class, E.LabelError,
         ("labels.parquet", "'digit'", "single class")),
    # a class with one row is judged, not refused: tests/failclosed/test_rare_classes.py
    # -- row-level faults: quarantined, default threshold 0 fails the job ------------------
    Case("nan-row", lambda c: A(c, c.input(emb=_with_row(lambda x: x.__setitem__((7, 3),
                                                                                np.nan)))),
         E.QuarantineThresholdError, ("in.parquet", "'emb'", "id 7 (non-finite)"),
         server=True, quarantine=True),
    Case("inf-row", lambda c: A(c, c.input(emb=_with_row(lambda x: x.__setitem__((8, 0),
                                                                                np.inf)))),
         E.QuarantineThresholdError, ("id 8 (non-finite)",), server=True, quarantine=True),
    Case("all-zero-row", lambda c: A(c, c.input(emb=_with_row(lambda x: x.__setitem__(9, 0)))),
         E.QuarantineThresholdError, ("id 9 (zero-vector)",), server=True, quarantine=True),
    Case("ragged-row", lambda c: A(c, c.input(emb=_ragged())),
         E.QuarantineThresholdError, ("id 10 (wrong-dimension)",), server=True,
         quarantine=True),
    Case("null-embedding-row", lambda c: A(c, c.input(emb=_null_emb())),
         E.QuarantineThresholdError, ("id 12 (null)",), server=True, quarantine=True),
    Case("null-inside-embedding", lambda c: A(c, c.input(emb=_null_value())),
         E.QuarantineThresholdError, ("id 13 (non-finite)",), server=True, quarantine=True),
    Case("null-cell-in-fixed-size-list", lambda c: A(c, c.input(emb=_fsl_null_cell())),
         E.QuarantineThresholdError, ("id 13 (non-finite)",), server=True, quarantine=True),
    Case("denormal-row", lambda c: A(c, c.input(emb=_with_row(
        lambda x: x.__setitem__(9, 1e-40)))),
         E.QuarantineThresholdError, ("id 9 (tiny-norm)",), server=True, quarantine=True),
    Case("near-zero-row", lambda c: A(c, c.input(emb=_with_row(
        lambda x: x.__setitem__(9, x[9] * 1e-9)))),
         E.QuarantineThresholdError, ("id 9 (tiny-norm)",), server=True, quarantine=True),
    Case("overflowing-norm-row", lambda c: A(c, c.input(emb=_with_row(
        lambda x: x.__setitem__((9, 0), 3e38)))),
         E.QuarantineThresholdError, ("id 9 (huge-norm)",), server=True, quarantine=True),
    # -- server faults ---------------------------------------------------------------------
    Case("model-not-served", lambda c: A(c, c.input(), model="ghost"),
         E.ServingError, ("'ghost'", "not loaded"), server=True),
    Case("version-not-served", lambda c: A(c, c.input(), "--model-version", "2",
                                           repo=_second_version(c)),
         E.ServingError, ("'mod'", "version 2"), server=True),
    Case("served-checksum-differs", lambda c: A(c, c.input(), repo=c.base / "other"),
         E.ChecksumMismatchError, ("'mod'", "sha256"), server=True),
    Case("response-wrong-shape", lambda c: A(c, c.input(), model="wrong_shape"),
         E.ResponseShapeError, ("'wrong_shape'", "17"), server=True),
    Case("response-wrong-dtype", lambda c: A(c, c.input(), model="wrong_dtype"),
         E.ResponseShapeError, ("'wrong_dtype'", "float64"), server=True),
    Case("response-nan", lambda c: A(c, c.input(), model="nan"),
         E.ResponseShapeError, ("'nan'", "NaN"), server=True),
    Case("model-bypassed", lambda c: A(c, c.input(), model="bypass"),
         E.ReleaseError, ("equal their input embedding", "first id"), server=True,
         quarantine=True),
    Case("request-timeout", lambda c: A(c, c.input(), "--timeout-s", "0.5", "--max-retries",
                                        "1", model="slow"),
         E.ServingError, ("'slow'", "DEADLINE_EXCEEDED", "after 1 retries"), server=True),
]  # fmt: skip


def _params(cases):
    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.triton] if c.server else []) for c in cases
    ]


def _context(tmp_path, request, fc, fc_repo, case) -> Ctx:
    url = (
        request.getfixturevalue("fc_server").grpc_url
        if case.server
        else f"127.0.0.1:{free_port()}"  # nothing listens: a validation miss fails loudly
    )
    return Ctx(tmp_path, fc_repo / "repo", fc_repo, url, fc)


def test_the_table_has_at_least_25_distinct_cases():
    assert len({c.name for c in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize("case", _params(CASES))
def test_fails_closed_and_keeps_the_previous_release(case, tmp_path, request, fc, fc_repo):
    ctx = _context(tmp_path, request, fc, fc_repo, case)
    argv = case.build(ctx)
    users = _users_files(fc, tmp_path)
    before = fc.fake_previous_release(ctx.out)
    with pytest.raises(E.MassError) as info:
        fc.mass_command(argv)
    err = info.value
    assert type(err) is case.error, f"{type(err).__name__}: {err}"
    for part in case.names:
        assert part in str(err), f"{part!r} not named in: {err}"
    assert fc.snapshot(ctx.out) == before  # the previous release, byte for byte
    assert fc.leftovers(ctx.out) == []  # nothing staged is left behind
    assert _users_files(fc, tmp_path) == users  # inputs (and their neighbours) untouched
    quarantine = Path(f"{ctx.out}_quarantine")
    assert quarantine.exists() == case.quarantine
    if case.quarantine:  # the bad rows, with their reason, are there to inspect
        assert pq.read_table(quarantine).column_names == ["id", "reason"]


def _users_files(fc, tmp: Path) -> dict[str, bytes]:
    """Every file under ``tmp`` but the release and its quarantine (ours to write)."""
    return {k: v for k, v in fc.snapshot(tmp).items()
            if not any(part.startswith("release") for part in Path(k).parts)}  # fmt: skip


ONE_PER_CLASS = {}
for _c in CASES:
    ONE_PER_CLASS.setdefault(_c.error, _c)


@pytest.mark.parametrize("case", _params(ONE_PER_CLASS.values()))
def test_the_cli_maps_every_error_class_to_exit_2_and_no_release_appears(
    case, tmp_path, request, fc, fc_repo, capsys
):
    """Through ``mass.cli.main`` (what a user runs), one case per error class of the table:
    exit code 2, the class name and the named file/column/parameter on stderr, no release
    where there was none and nothing staged left behind."""
    from mass.cli import main

    ctx = _context(tmp_path, request, fc, fc_repo, case)
    argv = case.build(ctx)
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"error: {case.error.__name__}: " in err, err
    assert case.names and all(part in err for part in case.names), (case.names, err)
    assert not ctx.out.exists()
    assert fc.leftovers(ctx.out) == []


def test_one_case_per_error_class_covers_every_class_in_the_table():
    assert set(ONE_PER_CLASS) == {c.error for c in CASES} and len(ONE_PER_CLASS) >= 8
    assert all(c.names for c in CASES)  # every case names what went wrong


@pytest.mark.triton
def test_forcing_a_suppressed_column_is_recorded_in_the_release(tmp_path, request, fc, fc_repo):
    server = request.getfixturevalue("fc_server")
    src = tmp_path / "in.parquet"
    fc.write_input(src)
    out = tmp_path / "release"
    fc.mass_command(["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
                     "--repository", str(fc_repo / "repo"), "--triton-url", server.grpc_url,
                     "--allow-columns", "digit", "--force-allow", "--no-audit"])  # fmt: skip
    table = pq.read_table(out)
    assert table.column_names == ["id", "emb", "digit"]
    assert json.loads(table.schema.metadata[b"mass.forced_columns"]) == ["digit"]


@pytest.mark.triton
def test_quarantined_rows_under_the_threshold_are_counted_and_never_released(
    tmp_path, request, fc, fc_repo
):
    server = request.getfixturevalue("fc_server")
    x = _emb_rows()
    x[[7, 70]] = np.nan
    x[9] = 0
    src = tmp_path / "in.parquet"
    fc.write_input(src, emb=embedding_array(x))
    out = tmp_path / "release"
    from beam_pipelines import anonymize

    summary = anonymize.run(["--input", str(src), "--output", str(out), "--model", "mod",
                             "--repository", str(fc_repo / "repo"), "--triton-url",
                             server.grpc_url, "--max-quarantined", "3",
                             "--no-audit"])  # fmt: skip
    assert (summary["rows_in"], summary["rows_out"], summary["quarantined"]) == (600, 597, 3)
    released = set(pq.read_table(out).column("id").to_pylist())
    assert released.isdisjoint({7, 9, 70}) and len(released) == 597
    q = pq.read_table(f"{out}_quarantine").sort_by("id")
    assert q.column("reason").to_pylist() == ["non-finite", "zero-vector", "non-finite"]
    shutil.rmtree(out)


# -- input reading and full disks, with the in-process stand-in model (no server) -------------
INFO = {"name": "mod", "version": 1, "sha256": "0" * 64, "method": "test",
        "suppress": ["digit"], "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip


def _anonymize_in_process(src: str, out: Path, *flags: str) -> dict:
    from beam_pipelines import anonymize
    from mass.testing.stand_ins import NumpyModifier
    from transforms.inference.function import FunctionModelHandler

    handler = FunctionModelHandler(NumpyModifier(), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    argv = ["--input", src, "--output", str(out), "--model", "mod", *flags]
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 512 KiB tmpfs (root only): a real ENOSPC from the kernel."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    rc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                        capture_output=True).returncode  # fmt: skip
    if rc != 0:
        pytest.skip("cannot mount a tmpfs here (not root); the injected case covers ENOSPC")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)  # lazy: the job's fds may linger


def _inject_enospc(monkeypatch):
    """Writes of the release's spills raise ENOSPC (the id index still fits): at
    mass.fs.atomic_output, through which every file of the job is written."""
    import contextlib
    import errno

    from mass import fs

    real = fs.atomic_output

    @contextlib.contextmanager
    def full(path):
        if "/_spills/" in str(path) and "/_ids/" not in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        with real(path) as f:
            yield f

    monkeypatch.setattr(fs, "atomic_output", full)


@pytest.mark.parametrize("how", ["tmpfs", "injected"])
def test_a_full_disk_is_a_named_error_and_nothing_leaks(how, tmp_path, request, monkeypatch, fc):
    src = tmp_path / "in.parquet"
    fc.write_input(src, rows=5000, row_group=1000)
    if how == "tmpfs":
        out = request.getfixturevalue("small_tmpfs") / "release"
    else:
        out = tmp_path / "release"
        _inject_enospc(monkeypatch)
    users = _users_files(fc, tmp_path)
    before = fc.fake_previous_release(out)
    with pytest.raises(E.ReleaseError) as info:
        _anonymize_in_process(str(src), out)
    msg = str(info.value)
    assert "no space left on the device" in msg and f"{out}.tmp-" in msg, msg
    assert fc.snapshot(out) == before
    assert fc.leftovers(out) == [] and not Path(f"{out}_quarantine").exists()
    assert _users_files(fc, tmp_path) == users


def test_rows_under_underscore_and_dot_names_are_never_released(tmp_path, fc):
    d = tmp_path / "spark"
    (d / "_temporary" / "0").mkdir(parents=True)
    fc.write_input(d / "part-0.parquet", rows=300)
    fc.write_input(d / "_temporary" / "0" / "part-1.parquet", rows=300, id_offset=300)
    fc.write_input(d / ".part-2.parquet", rows=300, id_offset=600)
    (d / "_SUCCESS").write_text("")
    users = _users_files(fc, tmp_path)
    summary = _anonymize_in_process(
        str(d), tmp_path / "release", "--no-audit"
    )  # reading, not privacy
    assert summary["rows_in"] == summary["rows_out"] == 300
    assert sorted(pq.read_table(tmp_path / "release").column("id").to_pylist()) == list(range(300))
    assert _users_files(fc, tmp_path) == users


def test_the_input_field_and_schema_metadata_stay_out_of_the_release(tmp_path, fc):
    src = tmp_path / "in.parquet"
    item = pa.field("item", pa.string(), metadata={"source": "ward 3 notes"})
    table = fc.write_input(src, tags=pa.array([["a", "b"]] * 600, pa.list_(item)))
    fields = [f.with_metadata({"note": "patients of ward 3"}) for f in table.schema]
    table = table.cast(pa.schema(fields, metadata={"owner": "alice", "mass.model": "forged"}))
    pq.write_table(table, src)
    _anonymize_in_process(
        str(src), tmp_path / "release", "--allow-columns", "note,tags", "--no-audit"
    )  # metadata handling, not privacy (600 rows)
    for part in (tmp_path / "release").glob("*.parquet"):
        schema = pq.read_schema(part)
        assert [f.metadata for f in schema] == [None, None, None, None]
        assert schema.field("tags").type.value_field.metadata is None  # nested fields too
        assert all(k.startswith(b"mass.") for k in schema.metadata)
        assert schema.metadata[b"mass.model"] == b"mod"  # ours, never the input's


def test_dictionary_encoded_ids_and_columns_are_released_as_their_values(tmp_path, fc):
    src = tmp_path / "in.parquet"
    ids = pa.array([f"u{i}" for i in range(600)])
    notes = pa.array([f"n{i % 7}" for i in range(600)])
    fc.write_input(src, id=ids.dictionary_encode(), note=notes.dictionary_encode(), row_group=50)
    # --no-audit: this test is about dictionary encoding; on 600 rows of 10 digits the audit's
    # upper bounds decide a clean release by draw (a run failed at 0.151 vs 0.150)
    summary = _anonymize_in_process(str(src), tmp_path / "release", "--shards", "2",
                                    "--allow-columns", "note", "--no-audit")  # fmt: skip
    assert summary["rows_out"] == 600
    released = pq.read_table(tmp_path / "release")
    assert released.schema.field("id").type == released.schema.field("note").type == pa.string()
    assert dict(
        zip(released.column("id").to_pylist(), released.column("note").to_pylist(), strict=True)
    ) == dict(zip(ids.to_pylist(), notes.to_pylist(), strict=True))
    assert sorted(released.column("id").to_pylist()) == sorted(ids.to_pylist())
    q = pq.read_schema(next((tmp_path / "release_quarantine").glob("*.parquet")))
    assert q.field("id").type == pa.string()


def test_new_input_errors_reach_the_user_as_named_cli_errors(tmp_path, fc, capsys):
    from mass.cli import main

    src = tmp_path / "in.parquet"
    fc.write_input(src)
    (tmp_path / "run.txt").write_text("notes")
    rc = main(["train", "--data", str(src), "--out", str(tmp_path / "run.txt"),
               "--suppress", "digit", "--epochs", "1", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "mass train: error: ConfigError: --out" in err and "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    fc.write_input(empty / "a.parquet", rows=0)
    rc = main(["anonymize", "--input", str(empty), "--output", str(tmp_path / "out"),
               "--model", "mod", "--repository", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "mass anonymize: error: MissingInputError:" in err and "holds no rows" in err
    assert (tmp_path / "run.txt").read_text() == "notes" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_passing_report_says_when_nothing_was_published(stop, tmp_path, monkeypatch, fc):
    """The gate passed and wrote audit.json ("pass": true), then the commit was stopped (Ctrl-C,
    a failing rename): audit.json records ``published: false`` and why, so a passing report is
    never read as a published release; the previous release stays. The audit here is a stand-in
    that passes (the stand-in model suppresses nothing), the commit's failure a real raise."""
    import beam_pipelines.anonymize as job
    from mass import fs
    from mass.release import publish

    def passing_audit(j, plan, staged, q_ids, **kw):
        fs.makedirs(str(j.report))
        path = fs.join(str(j.report), "audit.json")
        fs.write_json(path, {"pass": True})
        return {"verdict": "pass", "report": path, "policy": "stand-in"}

    swap = publish.swap_into_place

    def stopped(staging, to, **kw):
        if to != str(out):  # the quarantine is published first
            return swap(staging, to, **kw)
        raise stop("stopped at the commit")

    src, out = tmp_path / "in.parquet", tmp_path / "release"
    monkeypatch.setattr(job, "audit_staged", passing_audit)
    monkeypatch.setattr(publish, "swap_into_place", stopped)
    fc.write_input(src)
    before = fc.fake_previous_release(out)
    with pytest.raises(stop) as info:
        _anonymize_in_process(str(src), out)
    assert str(info.value) == "stopped at the commit"
    doc = json.loads((tmp_path / "release_report" / "audit.json").read_text())
    assert doc["pass"] is True and doc["published"] is False, doc
    why = "interrupted (SIGINT)" if stop is KeyboardInterrupt else "OSError: stopped at the commit"
    assert doc["not_published"].endswith(why) and str(out) in doc["not_published"], doc
    assert fc.snapshot(out) == before
