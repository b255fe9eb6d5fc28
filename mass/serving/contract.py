"""The Triton contract, in one place: what `mass export` writes, the served adapters read and
the jobs send (docs/contracts.md, "Triton models").

* tensor names and dtypes of each model kind (:func:`modifier_tensors`, ...);
* config.pbtxt parameter names (:data:`SHA256_PARAMETER`, :func:`version_parameter`) and the
  reader of the served sha256 (:func:`served_sha256`);
* the files of an exported version (:data:`EXPORT_JSON`, :data:`SHA256SUMS`, ...);
* the access header of the restricted server APIs (:data:`ACCESS_HEADER`, ...);
* the provenance readers: :func:`export_info` (``export.json`` on disk) and
  :func:`server_info` (a served model's config parameters, when no repository is at hand).

It imports nothing heavy: the served adapters, the job and the server all read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from mass.errors import ServingError

# -- tensors -------------------------------------------------------------------------------------
EMBEDDING = "EMBEDDING"  # FP32 [d]: a modifier's input, an extractor's output
ROW_SEED = "ROW_SEED"  # INT64 [1]: the owner-keyed seed of a row's noise (mass.noise)
PRIVATIZED = "PRIVATIZED"  # FP32 [d]: a modifier's output
IMAGE = "IMAGE"  # UINT8 [2352]: the image extractor's input (28 x 28 x 3)
TEXT = "TEXT"  # BYTES [1]: the text extractor's input (UTF-8)
IMAGE_DIM = 28 * 28 * 3
MINILM_DIM = 384


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str  # Triton TYPE_* name
    dims: tuple[int, ...]


def modifier_tensors(dim: int) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) of a data modifier: EMBEDDING + ROW_SEED -> PRIVATIZED."""
    return (
        [Tensor(EMBEDDING, "TYPE_FP32", (dim,)), Tensor(ROW_SEED, "TYPE_INT64", (1,))],
        [Tensor(PRIVATIZED, "TYPE_FP32", (dim,))],
    )


def extractor_tensors(in_dim: int, dim: int) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) of the image extractor: IMAGE -> EMBEDDING."""
    return [Tensor(IMAGE, "TYPE_UINT8", (in_dim,))], [Tensor(EMBEDDING, "TYPE_FP32", (dim,))]


def minilm_tensors(dim: int = MINILM_DIM) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) of the text extractor: TEXT -> EMBEDDING."""
    return [Tensor(TEXT, "TYPE_STRING", (1,))], [Tensor(EMBEDDING, "TYPE_FP32", (dim,))]


# -- config parameters ---------------------------------------------------------------------------
SHA256_PARAMETER = "mass_sha256"  # the newest version's weights sha256
TORCH_THREADS_PARAMETER = "torch_threads"  # optional: torch threads per model instance


def version_parameter(version: int | str) -> str:
    """Config parameter holding one version's weights sha256 (``mass_sha256_v3``)."""
    return f"{SHA256_PARAMETER}_v{version}"


def served_sha256(parameters: dict, version: int | str | None) -> str | None:
    """The weights sha256 a config's ``parameters`` (Triton's JSON form) record for
    ``version``: that version's own parameter, else the newest one's."""
    key = version_parameter(version) if version not in (None, "") else None
    entry = parameters.get(key) if key in parameters else parameters.get(SHA256_PARAMETER)
    return (entry or {}).get("string_value")


# -- files of an exported version ----------------------------------------------------------------
EXPORT_JSON = "export.json"
SHA256SUMS = "SHA256SUMS"
SIGNATURE = "SHA256SUMS.sig"
MANIFEST_FORMAT = "mass-export-manifest-v1"
SIGN_PURPOSE = "sign"  # the owner key's subkey that signs exports
STAGED_DIGESTS = "mass-staged.json"  # a staged model's verified digests (mass.serving.staging)
PYCACHE_BLOCKER = "__pycache__"  # an empty FILE: the stub cannot cache model.py as .pyc

# -- restricted server APIs (mass.serving.access) ------------------------------------------------
ACCESS_HEADER = "mass-access-token"
ACCESS_FILE_ENV = "MASS_TRITON_ACCESS_FILE"
RESTRICTED = "shared-memory,model-repository"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # Triton prefixes gRPC restricted header keys


# -- provenance readers --------------------------------------------------------------------------
def export_info(repository: str, model: str, version: str | int | None = None) -> dict:
    """``export.json`` of ``repository/model/<version>`` (latest numeric version if None)."""
    base = os.path.join(repository, model)
    versions = (
        sorted((int(v) for v in os.listdir(base) if v.isdigit()), reverse=True)
        if os.path.isdir(base)
        else []
    )
    if version in (None, ""):
        if not versions:
            raise ServingError(f"{base}: no numeric version folder; run `mass export` first")
        version = versions[0]
    elif str(version).isdigit() and int(version) not in versions:
        raise ServingError(f"{base}: no version {version} (versions there: "
                           f"{sorted(versions) or 'none'}); name one of them or re-export")  # fmt: skip
    path = os.path.join(base, str(version), EXPORT_JSON)
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError as e:
        raise ServingError(f"{path}: missing; re-export the model with `mass export`") from e
    info.setdefault("name", model)
    info.setdefault("version", int(version))
    return info


def server_info(url: str, model: str, version: str = "") -> dict:
    """Provenance from the served model's config ``parameters`` (no repository at hand).

    The sha256 is the one `mass export` records (:func:`served_sha256`); ``mass.<key>``
    parameters (sha256, method, config_hash, dim, suppress, preserve, version) are read
    where a hand-written config carries them.
    """
    import tritonclient.grpc as grpcclient

    try:
        cfg = grpcclient.InferenceServerClient(url).get_model_config(model, version, as_json=True)[
            "config"
        ]
    except Exception as e:
        raise ServingError(f"Triton at {url}: no config for model '{model}' ({e})") from e
    raw = cfg.get("parameters", {})
    params = {k.removeprefix("mass."): v.get("string_value", "") for k, v in raw.items()}
    info = {"name": model, "version": version or params.get("version", "")}
    for key in ("sha256", "method", "config_hash", "dim"):
        info[key] = params.get(key, "")
    for key in ("suppress", "preserve"):
        info[key] = json.loads(params[key]) if params.get(key) else []
    info["sha256"] = info["sha256"] or served_sha256(raw, version) or ""
    if not info["sha256"]:
        raise ServingError(
            f"Triton at {url}: model '{model}' carries no sha256 parameter; "
            "pass --repository so the release records export.json"
        )
    return info
