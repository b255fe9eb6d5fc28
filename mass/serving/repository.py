"""The files of a Triton model repository that `mass export` writes, apart from the export
itself: model names, ``config.pbtxt`` text, the generated ``model.py`` and version numbering.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

from mass.errors import ConfigError, MissingInputError
from mass.serving.contract import EXPORT_JSON, SHA256_PARAMETER, Tensor, version_parameter

NAME_MAX = 64
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
# characters allowed inside a quoted config.pbtxt string (no quote, backslash or control char)
_PBTXT_SAFE = re.compile(r"[A-Za-z0-9_.:/+=@ -]*")


# The stub runs Python isolated (PYTHONPATH ignored, see mass.serving.install): add those folders,
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


def pbtxt(value: object, what: str) -> str:
    """``value`` for a quoted config.pbtxt string; refuses what could break out of the quotes."""
    text = str(value)
    if not _PBTXT_SAFE.fullmatch(text):
        raise ConfigError(f"{what} {text!r}: not allowed in config.pbtxt (quote/control chars)")
    return text


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
            f'  {{ name: "{pbtxt(t.name, "tensor name")}" data_type: {t.data_type} dims: [ '
            f"{', '.join(str(d) for d in t.dims)} ] }}"
            for t in items
        ]
        return ",\n".join(rows)

    preferred = sorted({max(1, max_batch_size // 4), max_batch_size})
    params = "\n".join(
        f'parameters {{ key: "{pbtxt(k, "parameter")}" value: '
        f'{{ string_value: "{pbtxt(v, "parameter value")}" }} }}'
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


def next_version(model_dir: Path, version: int | None) -> int:
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


def sha_parameters(model_dir: Path) -> dict[str, str]:
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


def latest_export(repo: Path, name: str) -> dict:
    folders = sorted(
        (p for p in (repo / name).glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not folders or not (folders[-1] / EXPORT_JSON).exists():
        raise MissingInputError(f"{repo / name}: no exported version; run `mass export` first")
    return json.loads((folders[-1] / EXPORT_JSON).read_text())


def read_max_batch_size(model_dir: Path) -> int:
    for line in (model_dir / "config.pbtxt").read_text().splitlines():
        if line.startswith("max_batch_size:"):
            return int(line.split(":")[1])
    raise ConfigError(f"{model_dir / 'config.pbtxt'}: no max_batch_size")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
