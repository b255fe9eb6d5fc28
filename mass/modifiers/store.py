"""RUN_DIR/modifier.pt: save and load any registered modifier kind (no pickle on load).

Format (docs/contracts.md): ``{"kind", "spec", "state_dict", "meta"}``; a file without
``kind`` is a ``mass`` modifier (the first format). Loading needs only :mod:`mass.modifiers`
(every kind is registered when the package is imported), never the training code.
"""

from __future__ import annotations

from torch import nn

from mass.errors import UnreadableInputError
from mass.modifiers.base import MODIFIER_KINDS, build
from mass.safe_load import load_checkpoint, plain


def save_modifier(model: nn.Module, path: str, **extra: object) -> None:
    """Save any registered modifier with its kind and spec, plus JSON-able ``extra`` metadata."""
    import torch

    kind = getattr(model, "kind", None)
    if kind not in MODIFIER_KINDS:
        raise ValueError(f"{type(model).__name__} is not a registered modifier kind")
    spec = plain(model.spec.to_dict(), where=f"{kind} spec")
    blob = {"kind": kind, "spec": spec, "state_dict": model.state_dict()}
    torch.save({**blob, "meta": plain(dict(extra), where="modifier metadata")}, path)


def load_modifier(path: str) -> nn.Module:
    """Rebuild a modifier saved by :func:`save_modifier` (RUN_DIR/modifier.pt), in eval mode."""
    blob = _read(path)
    model = build(blob.get("kind", "mass"), blob["spec"], where=str(path))
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def modifier_meta(path: str) -> dict:
    """The ``extra`` metadata stored by :func:`save_modifier` (method, suppress, preserve, ...)."""
    return dict(_read(path).get("meta") or {})


def _read(path: str) -> dict:
    """The saved dict, loaded without pickle (:mod:`mass.safe_load`)."""
    remedy = "re-train the run (`mass train`) to write a fresh modifier.pt"
    blob = load_checkpoint(path, what="modifier", remedy=remedy)
    if not isinstance(blob, dict) or "state_dict" not in blob or "spec" not in blob:
        raise UnreadableInputError(f"{path}: not a modifier saved by `mass train`; {remedy}")
    return blob
