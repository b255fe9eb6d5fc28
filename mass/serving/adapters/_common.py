"""Pieces every python-backend adapter shares (imported only inside Triton)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import triton_python_backend_utils as pb_utils

from mass.serving.contract import TORCH_THREADS_PARAMETER
from mass.serving.manifest import verify_staged_version

if TYPE_CHECKING:
    import torch

# as_numpy() views Triton's shared memory read-only; torch only reads it, so the copy-free
# torch.from_numpy() is safe and its "not writable" warning is noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def setup(args: dict) -> tuple[dict, Path, dict, torch.device]:
    """(config, version folder, verified export.json, device) from Triton's initialize args.

    The staged copy (every file of the version, config.pbtxt included) is checked against the
    digests the job wrote after verifying the signed manifest with the owner key
    (:mod:`mass.serving.staging`; no key here) before torch is even imported: a tampered or
    unlisted file is refused in about a second, the model never loads, and nothing reaches
    the (weights-only) loader.
    """
    config = json.loads(args["model_config"])
    version_dir = Path(args["model_repository"]) / str(args["model_version"])
    meta = verify_staged_version(version_dir, config)
    import torch

    params = {k: v.get("string_value") for k, v in config.get("parameters", {}).items()}
    torch.set_num_threads(int(params.get(TORCH_THREADS_PARAMETER) or 1))
    return config, version_dir, meta, instance_device(args)


def instance_device(args: dict) -> torch.device:
    """cuda:<id> for a KIND_GPU instance (configs/gpu.pbtxt), else the CPU."""
    import torch

    if args.get("model_instance_kind") != "GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "KIND_GPU instance but torch.cuda.is_available() is False in Triton's Python; "
            "install a CUDA build of torch in the server image or use config.pbtxt (KIND_CPU)"
        )
    return torch.device(f"cuda:{args.get('model_instance_device_id', 0)}")


def output_dtype(config: dict, name: str) -> np.dtype:
    return pb_utils.triton_string_to_numpy(
        pb_utils.get_output_config_by_name(config, name)["data_type"]
    )


def input_dtype(config: dict, name: str) -> np.dtype:
    return pb_utils.triton_string_to_numpy(
        pb_utils.get_input_config_by_name(config, name)["data_type"]
    )


def error_response(message: str):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """Zero-copy numpy -> torch for a contiguous array."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def run_batched(requests, read, compute, write):
    """Read every request, run ``compute`` once on the concatenation, split the result back.

    ``read(request) -> tuple[np.ndarray, ...]`` may raise ``ValueError`` with a message for a
    bad request: that request gets a TritonError response, the others still run.
    """
    import torch

    responses: list = [None] * len(requests)
    parts, owners = [], []
    for i, request in enumerate(requests):
        try:
            parts.append(read(request))
            owners.append(i)
        except (ValueError, TypeError) as e:
            responses[i] = error_response(str(e))
    if parts:
        try:
            columns = [
                np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts, strict=True)
            ]
            with torch.inference_mode():
                result = compute(*columns)
            offsets = np.cumsum([0] + [len(p[0]) for p in parts])
            for k, i in enumerate(owners):
                responses[i] = write(result[offsets[k] : offsets[k + 1]])
        except Exception as e:  # one failing batch must not kill the model instance
            for i in owners:
                responses[i] = error_response(f"{type(e).__name__}: {e}")
    return responses
