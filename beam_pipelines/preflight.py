"""The anonymize job's checks before any data is read: the noise key a stochastic model
needs, the keyed ROW_SEED source bound to the served model, the input (files, columns, ids,
dimension), and, once the model is known, the allow-list, the audit plan and the allow-list
proxy check, each decided once (:func:`decide`); and the signed local export the job serves
(:func:`check_export`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from beam_pipelines.gate import AllowCheck, AuditPlan, audit_plan, check_allowed
from beam_pipelines.options import names_runner
from beam_pipelines.plan import AnonymizeJob, Staging
from mass.batches.id_index import IDS_DIR
from mass.batches.reference import reference_check
from mass.batches.validate import CheckedInput, check_dim, check_input
from mass.errors import ConfigError
from mass.fitrows import check_fitted_rows
from mass.keys import NOISE_KEY_ENV, looked_for
from mass.noise import KeyedSeeds
from mass.release.columns import resolve_allow_columns
from mass.serving.staging import checked_export
from mass.trained_classes import check_trained_classes
from transforms.modify import model_seeds, needs_noise_key


@dataclass(frozen=True)
class Decided:
    """What the job decided once the model is known (export.json, the server, or in-process)."""

    info: dict  # the model's provenance
    checked: CheckedInput
    seeds: KeyedSeeds | None
    audit: AuditPlan | None  # None: --no-audit
    allow: AllowCheck
    forced_columns: tuple[str, ...]  # by name (resolve_allow_columns) or as proxies


def check_noise_key(job: AnonymizeJob, info: dict) -> None:
    """Refuse a stochastic model without a key, before any work.

    ``info`` is the model's export.json (or the in-process model_info); ``{}`` when only a
    remote server is known, whose stochasticity cannot be checked: then a key is required.
    ``stochastic: false`` counts only beside ``modifier`` (older exports recorded false for
    the noise baselines).
    """
    if job.noise_key is None and needs_noise_key(info):
        stochastic = info.get("stochastic") if info.get("modifier") else None
        why = "is stochastic" if stochastic else "may be stochastic (no export.json says otherwise)"
        raise ConfigError(
            f"model '{job.model}' {why}: its release noise must be keyed by the owner's "
            f"secret, or anyone could recompute it from the released ids and subtract it; "
            f"looked in {looked_for(NOISE_KEY_ENV)}: pass --noise-key-file PATH or set "
            f"{NOISE_KEY_ENV} (create a key once with "
            "`mass keygen PATH`, kept outside git, DVC and the release); nothing was published"
        )


def keyed_seeds(job: AnonymizeJob, info: dict) -> KeyedSeeds | None:
    """ROW_SEED source: the owner-keyed PRF of the ids (all zeros without a key), as
    :class:`transforms.api.Anonymize` keys it (:func:`transforms.modify.model_seeds`)."""
    return model_seeds(job.noise_key, info, read_on_worker=job.noise_key_on_worker)


def check_job_input(job: AnonymizeJob, staging: Staging, dim: int | None) -> CheckedInput:
    """Files, columns, ids and (when known) dimension (see :mod:`mass.batches.validate`)."""
    return check_input(
        job.input,
        id_col=job.id_col,
        emb_col=job.emb_col,
        columns=list(job.allow_columns),
        dim=dim,
        index_dir=os.path.join(staging.stage, IDS_DIR),
        num_shards=job.serving.shards,
    )


def decide(job: AnonymizeJob, info: dict, checked: CheckedInput, *, dim_checked: bool,
           source: str | None = None) -> Decided:  # fmt: skip
    """Seeds, allow-list, audit plan and proxy check for the model ``info`` describes; the
    input's dimension is checked here unless ``checked`` was made knowing it. A transductive
    model fitted on other rows than ``source`` (the input as given, before ids are
    pseudonymized) is refused first (:func:`mass.fitrows.check_fitted_rows`)."""
    check_fitted_rows(info, source or job.input, id_col=job.id_col, emb_col=job.emb_col)
    check_trained_classes(info, [s for s in (job.labels, job.input) if s])
    if not dim_checked and info.get("dim"):
        check_dim(checked, emb_col=job.emb_col, dim=int(info["dim"]))
    forced = resolve_allow_columns(
        list(job.allow_columns),
        schema=checked.schema,
        suppress=list(info.get("suppress", [])),
        id_col=job.id_col,
        emb_col=job.emb_col,
        force=job.force_allow,
    )
    plan = audit_plan(job, info, checked.schema)
    allow = check_allowed(job, plan, checked)
    return Decided(
        info=info,
        checked=checked,
        seeds=keyed_seeds(job, info),
        audit=plan,
        allow=allow,
        forced_columns=tuple(dict.fromkeys([*forced, *allow.forced])),
    )


def check_export(job: AnonymizeJob) -> tuple[dict, object] | None:
    """The local export the job serves, verified before a server is started: signed (a folder
    nobody signed is refused), its weights still the exported ones (the server checks again
    when loading), "the newest" the newest signed export unless --model-version names one;
    returns (export.json, the in-process reference check), or None when the repository holds
    no such model (a remote server is asked instead)."""
    srv = job.serving
    if not os.path.isdir(os.path.join(srv.repository, job.model)):
        return None
    info = checked_export(srv.repository, job.model, srv.model_version, srv.signing_key())
    return info, reference_check(srv.repository, job.model, info,
                                 carry=names_runner(job.beam_args))  # fmt: skip
