"""Load checkpoints without ever running code from the file (no pickle from disk).

Every ``*.pt`` this product reads (modifier.pt, branches.pt, checkpoint.pt, extractor.pt) goes
through :func:`load_checkpoint`: ``torch.load(weights_only=True)``, torch's restricted
unpickler, which rebuilds only tensors and plain containers (dict, list, tuple, str, int, float,
bool, None) and refuses any other global before calling it. A file that needs the full pickle
(written by an older MaSS-ETL with numpy values in its metadata, or crafted to run code) is
refused with :class:`mass.errors.UnreadableInputError` naming the file and what to do.

Writers call :func:`plain` on metadata so what they save always loads under these rules.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from mass.errors import InputError, MissingInputError, UnreadableInputError

_PLAIN = (str, int, float, bool, type(None))


def plain(value: Any, *, where: str = "metadata") -> Any:
    """``value`` with numpy scalars/arrays turned into Python values; refuses anything else.

    Dicts (string keys), lists and tuples are converted recursively, so the result loads with
    ``weights_only=True`` and is JSON-able (tuples become lists in JSON).
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            out[k] = plain(v, where=f"{where}.{k}")
        return out
    if isinstance(value, list | tuple):
        items = [plain(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return plain(item(), where=where)  # numpy / torch scalar
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and type(value).__module__.startswith("numpy"):
        return plain(tolist(), where=where)
    raise ValueError(f"{where}: {type(value).__name__} is not a plain value (str/int/float/...)")


def load_checkpoint(path: str | os.PathLike[str], *, what: str, remedy: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; errors name ``path`` and ``remedy``.

    ``what`` names the file kind in messages ("modifier", "branches", ...); ``remedy`` is the
    command that writes a fresh one ("re-train the run with `mass train`").
    """
    import torch

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingInputError(f"{path}: no {what} file; {remedy}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnreadableInputError(
            f"{path}: refused to load this {what} file: it needs Python's pickle, which can run "
            f"code (an older MaSS-ETL wrote numpy values into it, or it was crafted); {remedy}. "
            f"Detail: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from e
    except InputError:
        raise
    except Exception as e:  # torch raises many types for a corrupt or foreign file
        raise UnreadableInputError(
            f"{path}: not a readable {what} file ({type(e).__name__}: {e}); {remedy}"
        ) from e
