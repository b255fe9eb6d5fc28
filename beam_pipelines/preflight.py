"""The anonymize job's checks before any data is read: the noise key a stochastic model
needs, the keyed ROW_SEED source bound to the served model, and the input (files, columns,
ids, dimension, allow-list, the audit plan and the allow-list proxy check)."""

from __future__ import annotations

import os

from beam_pipelines.gate import _audit_plan, _check_allowed
from mass.errors import ConfigError
from mass.keys import NOISE_KEY_ENV, looked_for
from mass.noise import KeyedSeeds
from transforms.parquet_write import IDS_DIR
from transforms.release import resolve_allow_columns
from transforms.validate import CheckedInput, check_dim, check_input


def check_noise_key(args, info: dict) -> None:
    """Refuse a stochastic model without a key, before any work.

    ``info`` is the model's export.json (or the in-process model_info); ``{}`` when only a
    remote server is known, whose stochasticity cannot be checked: then a key is required.
    ``stochastic: false`` counts only beside ``modifier`` (older exports recorded false for
    the noise baselines).
    """
    stochastic = info.get("stochastic") if info.get("modifier") else None
    if args._noise_key is None and stochastic is not False:
        why = "is stochastic" if stochastic else "may be stochastic (no export.json says otherwise)"
        raise ConfigError(
            f"model '{args.model}' {why}: its release noise must be keyed by the owner's "
            f"secret, or anyone could recompute it from the released ids and subtract it; "
            f"looked in {looked_for(NOISE_KEY_ENV)}: pass --noise-key-file PATH or set "
            f"{NOISE_KEY_ENV} (create a key once with "
            "`mass keygen PATH`, kept outside git, DVC and the release); nothing was published"
        )


def keyed_seeds(args, info: dict) -> KeyedSeeds | None:
    """ROW_SEED source: the owner-keyed PRF of the ids (all zeros without a key)."""
    key = args._noise_key
    if key is None:
        return None
    # bound to the modifier: two modifiers never share a row's noise (docs/threat-model.md)
    context = str(info.get("sha256") or "")
    return KeyedSeeds.of(
        key, context=context, read_on_worker=getattr(args, "noise_key_on_worker", False)
    )


def check_job_input(args, info: dict, checked: CheckedInput | None = None) -> CheckedInput:
    """Files, columns, ids, dimension and allow-list (see :mod:`transforms.validate`)."""
    dim = int(info["dim"]) if info.get("dim") else None
    if checked is None:
        checked = check_input(
            args.input,
            id_col=args.id_col,
            emb_col=args.emb_col,
            columns=args.allow_columns,
            dim=dim,
            index_dir=os.path.join(args._stage, IDS_DIR),
            num_shards=args.shards,
        )
    elif dim is not None:
        check_dim(checked, emb_col=args.emb_col, dim=dim)
    if info:
        resolve_allow_columns(
            args.allow_columns,
            schema=checked.schema,
            suppress=list(info.get("suppress", [])),
            id_col=args.id_col,
            emb_col=args.emb_col,
            force=args.force_allow,
        )
        args._plan = _audit_plan(args, info, checked.schema)
        _check_allowed(args, checked)
    return checked
