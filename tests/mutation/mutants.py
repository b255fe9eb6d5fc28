"""Hand-made mutants of the privacy- and safety-critical code, applied by name.

A mutant names a function or method (``module:qualname``), one snippet of its current source
and the broken replacement. :func:`apply` recompiles the function's source with the snippet
replaced and swaps the new code into the existing function object (``__code__``), so every
``from module import name`` already bound elsewhere runs the broken variant too. A mutant
whose target is gone, or whose snippet is no longer in the source (the code was rewritten),
is *stale*: reported as such by ``tests/mutation/run.py``, never a crash.

``tests/conftest.py`` applies the mutant named by env ``MASS_MUTANT`` when pytest starts, so
it holds in the pytest process (including Beam's in-process runners) but not in
subprocesses (CLI subprocess tests, Triton's python backend).
"""

from __future__ import annotations
import __future__

import importlib
import inspect
import textwrap
from dataclasses import dataclass

ENV = "MASS_MUTANT"

QUARANTINE = ("tests/transforms/test_quarantine.py", "tests/failclosed/test_properties.py")
RELEASE = (
    "tests/transforms/test_release_guards.py",
    "tests/transforms/test_release.py",
    "tests/transforms/test_id_index.py",
    "tests/failclosed/test_atomic_publish.py",
    "tests/failclosed/test_bad_inputs.py",
)
NOISE = (
    "tests/mass/test_keys.py",
    "tests/mass/test_noise_reference.py",
    "tests/mass/test_noise.py",  # the noise helper's tests, where present
    "tests/mass/methods/test_closed_form.py::"
    "test_gaussian_noise_is_a_pure_function_of_the_row_seed",
)
AUDIT = ("tests/mass/test_audit.py", "tests/mass/audit", "tests/mass/test_metrics.py")
SHM = (
    "tests/beam_pipelines/test_triton_jobs.py::"
    "test_shared_memory_and_grpc_payloads_give_byte_identical_releases",
)


@dataclass(frozen=True)
class Mutant:
    name: str
    target: str  # "package.module:function" or "package.module:Class.method"
    old: str  # a snippet of the target's current source (must occur exactly once)
    new: str  # what replaces it
    tests: tuple[str, ...]  # pytest paths / node ids that should kill it
    why: str  # what the broken code would let through
    survives: str = ""  # if it is expected to survive: why that is acceptable


MUTANTS = [
    # --- quarantine: bad rows never reach the model or the release -------------------------
    Mutant("quarantine-nonfinite-passes", "transforms.quarantine:validate_batch",
           "codes[~finite] = NONFINITE", "pass", QUARANTINE,
           "rows with NaN/Inf are sent to the model and released"),
    Mutant("quarantine-zero-passes", "transforms.quarantine:validate_batch",
           "codes[finite & ~mat.any(axis=1)] = ZERO", "pass", QUARANTINE,
           "all-zero rows (a failed extraction) are released as one constant vector"),
    Mutant("quarantine-wrong-dim-passes", "transforms.quarantine:validate_batch",
           "codes[~right_dim] = WRONG_DIM", "pass", QUARANTINE,
           "a list of the wrong length is padded with NaN instead of quarantined as such"),
    Mutant("quarantine-null-passes", "transforms.quarantine:validate_batch",
           "codes[arr.is_null().to_numpy(zero_copy_only=False)] = NULL", "pass", QUARANTINE,
           "null embeddings are reported under another reason"),
    Mutant("quarantine-fast-path-always", "transforms.quarantine:validate_batch",
           "if ok.all() and pa.types.is_fixed_size_list(typ)",
           "if True or pa.types.is_fixed_size_list(typ)",
           QUARANTINE, "every batch passes uncopied and unvalidated"),
    Mutant("quarantine-dimension-unchecked", "transforms.quarantine:validate_batch",
           "if typ.list_size != dim:", "if False:", QUARANTINE,
           "a fixed-size column of another model's dimension is read with the wrong shape"),
    Mutant("modify-drops-bad-rows", "transforms.modify:ModifyRowGroupFn.process",
           'yield "bad", bad', "pass", QUARANTINE,
           "quarantined rows vanish: not counted, not inspectable"),
    Mutant("modify-unmodified-flag-off", "transforms.parquet_io:_row_flags",
           "flags = np.where(same, UNMODIFIED, 0).astype(np.uint8)",
           "flags = np.zeros(n, np.uint8)", RELEASE,
           "rows equal to their input (a bypassed model) are released"),
    Mutant("modify-nonfinite-flag-off", "transforms.parquet_io:_row_flags",
           "flags[~np.isfinite(out).all(axis=1)] |= NONFINITE", "pass", RELEASE,
           "NaN/Inf model outputs are released"),
    # --- release invariants and publication --------------------------------------------------
    Mutant("release-unmodified-allowed", "transforms.release:verify_release",
           'if s.get("unmodified"):', "if False:", RELEASE,
           "a release of unmodified embeddings is published"),
    Mutant("release-nonfinite-allowed", "transforms.release:verify_release",
           'if s.get("nonfinite"):', "if False:", RELEASE, "NaN/Inf rows are published"),
    Mutant("release-extra-columns-allowed", "transforms.release:verify_release",
           "if extra:", "if False:", RELEASE, "label columns outside the allow-list are published"),
    Mutant("release-metadata-unchecked", "transforms.release:verify_release",
           "if missing:", "if False:", RELEASE, "files without provenance metadata are published"),
    Mutant("release-row-count-unchecked", "transforms.release:verify_release",
           "if len(got) != len(expected_ids):", "if False:", RELEASE,
           "a release with lost rows is published"),
    Mutant("release-duplicates-allowed", "transforms.release:verify_release",
           "if got.null_count or len(pc.unique(got)) != len(got):", "if False:", RELEASE,
           "duplicate or null ids are published"),
    Mutant("release-id-set-unchecked", "transforms.release:verify_release",
           "if not a.equals(", "if False and not a.equals(", RELEASE,
           "ids other than the input's are published"),
    Mutant("release-shard-count-unchecked", "transforms.release:verify_release",
           "if len(files) != num_shards:", "if False:", RELEASE,
           "a release missing part files is published"),
    Mutant("publish-leaves-staging", "transforms.release:publish_release",
           "            shutil.rmtree(staging, ignore_errors=True)", "            pass", RELEASE,
           "a failed publication leaves its staged (unverified) rows on disk"),
    Mutant("publish-deletes-previous-first", "transforms.release:swap_into_place",
           "    if os.path.isdir(out) and _exchange(staging, out):",
           "    shutil.rmtree(out, ignore_errors=True)\n"
           "    if os.path.isdir(out) and _exchange(staging, out):", RELEASE,
           "a crash during publication leaves no release at all (previous one deleted first)"),
    Mutant("recover-drops-previous", "transforms.release:recover_output",
           "os.replace(path, base)", "shutil.rmtree(path, ignore_errors=True)", RELEASE,
           "after a crash between the two renames the previous release is deleted"),
    Mutant("allow-list-suppressed-silently", "transforms.release:resolve_allow_columns",
           "if not force:", "if False:", RELEASE,
           "a suppressed attribute column is released without --force-allow"),
    Mutant("allow-list-media-by-name-ignored", "transforms.release:resolve_allow_columns",
           "col.lower() in RAW_MEDIA_NAMES", "False", RELEASE,
           "a raw media column (e.g. 'image') is released"),
    Mutant("metadata-forgets-forced-columns", "transforms.release:release_metadata",
           '"mass.forced_columns": json.dumps(list(forced_columns))',
           '"mass.forced_columns": "[]"', RELEASE,
           "a forced (suppressed) column is released without a record of it"),
    # --- noise keying -------------------------------------------------------------------------
    Mutant("noise-key-ignored", "mass.noise:keyed_row_seeds",
           'sub = key.subkey("noise", 16)', "sub = bytes(16)", NOISE,
           "the noise is computable by anyone from the public row ids"),
    Mutant("noise-wrong-subkey", "mass.noise:keyed_row_seeds",
           'sub = key.subkey("noise", 16)', 'sub = key.subkey("sign", 16)', NOISE,
           "noise seeds share the signing subkey (no purpose separation)"),
    Mutant("noise-mask-dropped", "mass.noise:keyed_row_seeds",
           " & np.uint64(0x3FFFFFFFFFFFFFFF)", "", NOISE,
           "seeds leave [0, 2**62) (negative int64 seeds)"),
    Mutant("noise-one-sipround", "mass.noise:siphash24_u64",
           "v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)",
           "v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 1)",
           NOISE, "a weakened PRF (SipHash-1-4)"),
    Mutant("row-noise-ignores-high-bits", "mass.noise:row_noise",
           "hi = (seeds >> 32) & _MASK32", "hi = seeds * 0", NOISE,
           "rows whose seeds share the low 32 bits get the same noise"),
    Mutant("row-noise-global-rng", "mass.noise:row_noise",
           "return z[:, :dim].to(torch.float32)",
           "return torch.randn(z.shape[0], dim)", NOISE,
           "noise drawn from the global generator: not reproducible from the seed"),
    # --- audit expectations --------------------------------------------------------------------
    Mutant("audit-suppressed-rule-always-true", "mass.metrics:suppressed_ok",
           "return accuracy <= baseline + margin + 1e-12", "return True", AUDIT,
           "a release that leaks the suppressed attribute passes the audit"),
    Mutant("audit-preserved-rule-always-true", "mass.metrics:preserved_ok",
           "return original <= 0 or", "return True or", AUDIT,
           "a release that destroyed the preserved attribute passes the audit"),
    Mutant("audit-suppressed-success-forced",
           "mass.audit.expectations:ExpectAttributeToBeSuppressed._validate",
           '"success": not failed and bool(details)', '"success": True', AUDIT,
           "the suppression expectation never fails"),
    Mutant("audit-missing-judge-ignored",
           "mass.audit.expectations:ExpectAttributeToBeSuppressed._validate",
           "details, failed = [], list(missing)", "details, failed = [], []", AUDIT,
           "an unmeasured required attacker counts as a pass"),
    Mutant("audit-role-unchecked",
           "mass.audit.expectations:ExpectAttributeToBeSuppressed._validate",
           'if r["role"] != "suppressed":', "if False:", AUDIT,
           "judge rows of another role are read as suppression evidence",
           survives="defence in depth: the judge frame (mass.audit.data) gives every row of a "
           "suppressed attribute the role 'suppressed', so no audit run reaches this branch; "
           "only an expectation test on a hand-made frame can kill it (audit tests, issue 16 "
           "item 2, another branch)"),
    Mutant("audit-preserved-success-forced",
           "mass.audit.expectations:ExpectAttributeToBePreserved._validate",
           '"success": ok,', '"success": True,', AUDIT,
           "the preservation expectation never fails",
           survives="the preserved half of the audit has no failing-release test on this "
           "branch (issue 16 item 2: an audit test per expectation, another branch); re-run "
           "`make mutation` after merging: it must be killed then"),
    Mutant("audit-preserved-counts-frozen",
           "mass.audit.expectations:ExpectAttributeToBePreserved._validate",
           'if r["role"] == "preserved" and r["judge"] != "frozen"',
           'if r["role"] == "preserved"', AUDIT,
           "the frozen judge (not retrained) counts as proof of preservation",
           survives="as audit-preserved-success-forced: needs a release whose retrained "
           "attackers lose the preserved attribute while the frozen judge still reads it "
           "(issue 16 item 2, another branch)"),
    Mutant("audit-suite-skips-suppression", "mass.audit.suite:build_suites",
           "for attr, margins in spec.suppressed.items():",
           "for attr, margins in {}.items():", AUDIT,
           "no suppression expectation is built: leaks go unchecked"),
    Mutant("audit-suite-skips-preservation", "mass.audit.suite:build_suites",
           "for attr, frac in spec.preserved.items():", "for attr, frac in {}.items():", AUDIT,
           "no preservation expectation is built"),
    Mutant("audit-suite-allows-label-columns", "mass.audit.suite:build_suites",
           "if spec.forbidden:", "if False:", AUDIT,
           "a label column in the release is not flagged"),
    Mutant("audit-suite-skips-norm", "mass.audit.suite:build_suites",
           "strict_min=True,", "strict_min=True, mostly=0.0,", AUDIT,
           "non-unit-norm (unnormalised or broken) embeddings pass"),
    Mutant("audit-run-ignores-failures", "mass.audit.suite:run_suites",
           "success = success and bool(result.success)", "success = True", AUDIT,
           "a failing suite still yields a passing audit"),
    # --- shared memory ------------------------------------------------------------------------
    Mutant("shm-forced-off", "transforms.triton_handler:TritonModelHandler._shm_output_shape",
           "if not conn.shm or", "if True or", SHM,
           "--triton-shm on silently sends gRPC payloads (the shm test must notice)"),
]  # fmt: skip

BY_NAME = {m.name: m for m in MUTANTS}
assert len(BY_NAME) == len(MUTANTS), "mutant names must be unique"


class StaleMutant(LookupError):
    """The target or its snippet no longer exists in the code."""


def _resolve(target: str):
    modname, _, qual = target.partition(":")
    try:
        obj = importlib.import_module(modname)
    except ImportError as e:
        raise StaleMutant(f"module {modname} not importable ({e})") from e
    parts = qual.split(".")
    for i, part in enumerate(parts):
        holder = obj
        obj = holder.__dict__.get(part) if inspect.isclass(holder) else getattr(holder, part, None)
        if obj is None:
            raise StaleMutant(f"{target}: no {'.'.join(parts[: i + 1])}")
    obj = getattr(obj, "__func__", obj)  # staticmethod / classmethod
    if not inspect.isfunction(obj):
        raise StaleMutant(f"{target}: not a function")
    return obj


def mutated_source(m: Mutant) -> tuple[object, str]:
    """(the target function, its source with the snippet replaced); StaleMutant if gone."""
    func = _resolve(m.target)
    src = textwrap.dedent(inspect.getsource(func))
    count = src.count(m.old)
    if count != 1:
        raise StaleMutant(f"{m.target}: snippet {m.old!r} occurs {count} times (expected 1)")
    lines = src.replace(m.old, m.new).splitlines(keepends=True)
    while lines and lines[0].lstrip().startswith("@"):  # decorators: the object exists already
        lines.pop(0)
    return func, "".join(lines)


def apply(name: str) -> None:
    """Swap the broken code of mutant ``name`` into its target (KeyError, StaleMutant)."""
    m = BY_NAME[name]
    func, src = mutated_source(m)
    flags = __future__.annotations.compiler_flag
    code = compile(src, inspect.getsourcefile(func) or "<mutant>", "exec", flags=flags,
                   dont_inherit=True)  # fmt: skip
    ns: dict = {}
    exec(code, func.__globals__, ns)  # defines the function; nothing else runs
    new = ns[func.__name__]
    if new.__code__.co_freevars != func.__code__.co_freevars:
        raise StaleMutant(f"{m.target}: closure variables differ; cannot swap code")
    func.__code__ = new.__code__
