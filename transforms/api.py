"""The Beam API for a user's own pipeline: :class:`Anonymize` and :class:`AuditGate`.

    anon = Anonymize(model="mine", repository="triton_models", triton_url="127.0.0.1:8001")
    out = rows | anon                        # rows: dicts or pa.RecordBatch, from any source
    out.quarantined | WriteToText(...)       # the dead letters: id + reason, nothing else
    (out.rows | AuditGate("heldout.parquet", anonymize=anon)   # fails the run when it fails
              | beam.io.WriteToParquet(...))  # the user's sink sees rows only after a pass

``Anonymize`` runs the very per-batch core of the `mass anonymize` job,
:class:`transforms.modify.BatchModifier` (compose, not wrap): the row validation and
quarantine (:mod:`mass.batches.quarantine`), the model handler (:mod:`transforms.inference`:
Triton, or any handler of that package) with the owner-keyed ROW_SEED
(:class:`mass.noise.KeyedSeeds`, bound to the export's sha256) and the in-process recompute
of flagged and sampled rows against the signed weights (:mod:`mass.batches.reference`), on
the signed export checked in the repository (:mod:`mass.serving.staging`,
:mod:`mass.serving.manifest`). Its output is ``DoOutputsTuple`` of ``rows`` (main:
id, the privatized embedding and the ``keep_columns``; never anything else of the input) and
``quarantined`` (the dead-letter output, as Beam's ``with_exception_handling()`` gives one).
A row the served model left unmodified or computed otherwise than the signed weights fails
the run at once (:class:`mass.errors.ServingError`); the job refuses the same rows when it
verifies its staged release.

``AuditGate`` gathers the rows, runs the publication audit (:func:`mass.api.report.
audit_release`, the gate of `mass anonymize`) and only then re-emits them: when the audit
fails the pipeline raises :class:`mass.errors.AuditFailedError` and nothing reaches the sink.
It holds the whole release on one worker (the audit judges all rows at once).
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa

from mass.batches.reference import reference_check
from mass.errors import AuditFailedError, ConfigError, InvalidValueError
from mass.serving.tensors import ModifierInputs
from transforms.modify import BatchModifier, model_seeds, needs_noise_key

QUARANTINED = "quarantined"
ROWS = "rows"
_SOURCE = "__mass_input"  # the model's input, kept beside its output for the bypass check


def _export(repository: str, model: str, version: str, signing_key_file: str | None) -> dict:
    """export.json of a signed, verified export, "the newest" (``version`` empty) never rolled
    back: the checks of `mass anonymize` (refused otherwise)."""
    from mass.keys import SIGNING_KEY_ENV, resolve_key
    from mass.serving.manifest import signing_key
    from mass.serving.staging import checked_export

    key = signing_key(resolve_key(signing_key_file, SIGNING_KEY_ENV), flag="signing_key_file=")
    return checked_export(repository, model, version, key)


def _seeds(info: dict, noise_key_file: str | None):
    """The job's ROW_SEED source (None without a key); a stochastic model needs the key."""
    from mass.keys import NOISE_KEY_ENV, looked_for, resolve_key

    key = resolve_key(noise_key_file, NOISE_KEY_ENV)
    if key is None and needs_noise_key(info):
        raise ConfigError(f"model {info.get('name')!r} adds release noise keyed by the owner "
                          f"key: pass noise_key_file= (looked in {looked_for(NOISE_KEY_ENV)})")  # fmt: skip
    return model_seeds(key, info)


class _AnonymizeBatchFn(beam.DoFn):
    """One batch through the job's core (:class:`transforms.modify.BatchModifier`): bad rows
    to the dead letter, the rest modified and checked (a refused row fails the run)."""

    def __init__(self, core: BatchModifier) -> None:
        self._core = core

    def setup(self):
        self._core.load()

    def teardown(self):
        self._core.close()

    def process(self, items):
        """``items``: a list from BatchElements, of record batches (each its own batch, out as
        a record batch) or of dicts (one batch, out as dicts)."""
        if items and all(isinstance(b, pa.RecordBatch) for b in items):
            for batch in items:
                yield from self._one(batch, dicts=False)
        elif items:
            yield from self._one(pa.RecordBatch.from_pylist(list(items)), dicts=True)

    def _one(self, batch: pa.RecordBatch, *, dicts: bool):
        core = self._core
        missing = [c for c in core.columns if c not in batch.schema.names]
        if missing:
            raise ConfigError(f"Anonymize: rows have no column(s) {missing} (columns: "
                              f"{batch.schema.names}); pass id_col=/emb_col=/keep_columns=")  # fmt: skip
        ids = batch.column(core.id_col)
        if ids.null_count:  # as `mass anonymize` refuses one: a row without an id has no seed
            row = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
            raise InvalidValueError(f"Anonymize: id column '{core.id_col}' is null in row {row} "
                                    f"of a batch of {batch.num_rows} ({ids.null_count} null in "
                                    "that batch); every row needs a unique id")  # fmt: skip
        out, flags, bad = core.process(batch)
        if bad.num_rows:
            for item in bad.to_pylist() if dicts else [bad]:
                yield beam.pvalue.TaggedOutput(QUARANTINED, item)
        if out is None:
            return
        core.refuse(out, flags, "Anonymize")
        out = out.select(core.columns)
        yield from (out.to_pylist() if dicts else [out])


class Anonymize(beam.PTransform):
    """Rows (dicts, or Arrow record batches) -> ``rows`` (privatized) and ``quarantined``.

    ``model``: the exported modifier's name; ``repository``: the signed model repository it
    was exported to (verified here; gives its sha256, dimension and whether it is stochastic);
    ``triton_url``: the gRPC address of a Triton server serving that repository (`mass serve`
    or :class:`mass.serving.TritonServer`); ``handler``: another handler of
    :mod:`transforms.inference` instead (e.g. an in-process FunctionModelHandler built with
    ``keep_input_as="__mass_input"``, the input copy the bypass check reads).
    ``noise_key_file``: the owner key (default as `mass anonymize`: $MASS_NOISE_KEY_FILE,
    then .mass/local.yaml); ``signing_key_file``: the key the export was signed with (default
    $MASS_SIGNING_KEY_FILE, then .mass/local.yaml). Dict rows are batched by
    ``BatchElements`` (up to ``batch_rows``).
    ``keep_columns``: columns released beside id and emb (nothing else ever is).
    """

    def __init__(self, model: str, *, repository: str, triton_url: str | None = None,
                 handler=None, version: str = "", id_col: str = "id", emb_col: str = "emb",
                 keep_columns=(), noise_key_file: str | None = None, batch_rows: int = 4096,
                 timeout_s: float = 60.0, signing_key_file: str | None = None) -> None:  # fmt: skip
        super().__init__()
        if (triton_url is None) == (handler is None):
            raise ConfigError("Anonymize: pass triton_url= (a server serving repository=) or "
                              "handler= (an in-process model handler), one of them")  # fmt: skip
        self.model, self.id_col, self.emb_col = model, id_col, emb_col
        self.keep_columns, self.batch_rows = tuple(keep_columns), int(batch_rows)
        self.info = _export(repository, model, version, signing_key_file)
        self.seeds = _seeds(self.info, noise_key_file)
        self._reference = reference_check(repository, model, self.info)
        dim = int(self.info["dim"])
        if triton_url is not None:  # else handler= (exactly one of them, checked above)
            from transforms.inference.triton import TritonModelHandler

            handler = TritonModelHandler(triton_url, model, version=version, output_col=emb_col,
                                         inputs=ModifierInputs(id_col=id_col, emb_col=emb_col),
                                         output_dim=dim, timeout_s=timeout_s,
                                         keep_input_as=_SOURCE)  # fmt: skip
        # the job's per-batch core; it binds the handler's ROW_SEED to self.seeds
        self._core = BatchModifier(handler, columns=[id_col, emb_col, *self.keep_columns],
                                   id_col=id_col, emb_col=emb_col, dim=dim, verify_col=_SOURCE,
                                   reference=self._reference, seeds=self.seeds)  # fmt: skip

    def release_metadata(self) -> dict[bytes, bytes]:
        """The ``mass.*`` metadata of a release of these rows (what the audit reads)."""
        from mass.release.columns import release_metadata

        fingerprint = self.seeds.fingerprint if self.seeds else ""
        return release_metadata(self.info, audited=True, noise_key_fingerprint=fingerprint)

    def expand(self, pcoll):
        fn = _AnonymizeBatchFn(self._core)
        return (
            pcoll
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.batch_rows)
            | "Anonymize" >> beam.ParDo(fn).with_outputs(QUARANTINED, main=ROWS)
        )


class AuditGate(beam.PTransform):
    """Rows of an :class:`Anonymize` step -> the same rows, only once their audit passed.

    ``labels``: held-out labels (a Parquet path, or a table / DataFrame) with the id, the
    model's suppress/preserve attributes and, unless ``input`` gives them, the original
    embeddings; ``policy``: an :class:`mass.audit.AuditPolicy` or a params.yaml path (default
    as `mass anonymize`: ./params.yaml's ``audit:`` section when it exists, else the built-in
    policy); ``anonymize``: the step whose output this is (its model's attributes and release
    metadata); ``report_dir``: where report.html and audit.json go (kept whatever the verdict).
    """

    def __init__(self, labels, policy=None, *, anonymize: Anonymize, watch=(),
                 report_dir: str | None = None, input=None,
                 noise_key_file: str | None = None) -> None:  # fmt: skip
        super().__init__()
        from mass.audit import AuditPolicy, load_policy

        if policy is None and os.path.exists("params.yaml"):
            policy = "params.yaml"
        self.policy = policy if isinstance(policy, AuditPolicy) else load_policy(policy)
        self.labels, self.input, self.report_dir = labels, input, report_dir
        self.watch, self.noise_key_file = tuple(watch), noise_key_file
        self.meta = anonymize.release_metadata()
        # the signed modifier and row seeds of the step: the audit recomputes the near rows
        self._near = _NearOf(self.meta, anonymize._reference, anonymize.seeds)
        self.suppress = tuple(anonymize.info.get("suppress") or ())
        self.preserve = tuple(anonymize.info.get("preserve") or ())
        self.id_col, self.emb_col = anonymize.id_col, anonymize.emb_col
        self.keep = anonymize.keep_columns
        if not self.suppress:
            raise ConfigError(f"AuditGate: model {anonymize.model!r} records no suppressed "
                              "attribute to audit")  # fmt: skip

    def expand(self, rows):
        return (
            rows
            | "Gather" >> beam.combiners.ToList()
            | "AuditThenRelease" >> beam.FlatMap(self._audit_then_release)
        )

    def _table(self, items: list) -> pa.Table:
        from mass.api import frames

        if items and all(isinstance(b, pa.RecordBatch) for b in items):
            table = pa.Table.from_batches(items)
        else:
            table = pa.Table.from_pylist(items)
        x = frames.matrix(table, what="AuditGate rows", emb_col=self.emb_col)
        keep = {c: table.column(c) for c in self.keep}
        out = frames.embedding_table(x, table.column(self.id_col), id_col=self.id_col,
                                     emb_col=self.emb_col, labels=keep)  # fmt: skip
        return out.replace_schema_metadata(self.meta)

    def _audit_then_release(self, items: list):
        from mass.api.report import audit_release

        if not items:
            raise AuditFailedError("AuditGate: no rows reached the gate; nothing to release")
        report = audit_release(self._table(items), self.labels, suppress=self.suppress,
                               preserve=self.preserve, watch=self.watch, policy=self.policy,
                               report_dir=self.report_dir, id_col=self.id_col,
                               emb_col=self.emb_col, allow_columns=self.keep, input=self.input,
                               noise_key_file=self.noise_key_file, model=self._near)  # fmt: skip
        if not report.passed:
            failed = "; ".join(report.audit.get("failed_expectations") or []) or "see the report"
            where = f" (report: {self.report_dir})" if self.report_dir else ""
            raise AuditFailedError(f"AuditGate: the audit of {len(items)} element(s) failed"
                                   f"{where}: {failed}; nothing passed the gate")  # fmt: skip
        yield from items


class _NearOf:
    """What :func:`mass.api.report.audit_release` reads of the model behind the gated rows:
    the release metadata, and the signed modifier (None: no export to recompute with) with
    the step's row seeds, which recompute the rows at or above the audit's ``max_cosine``."""

    def __init__(self, meta: dict, reference, seeds) -> None:
        self.meta, self.reference, self.seeds = meta, reference, seeds

    def release_metadata(self) -> dict:
        return self.meta

    def near_recompute(self):
        from mass.audit.recompute import NearRecompute

        return None if self.reference is None else NearRecompute(self.reference, self.seeds)
