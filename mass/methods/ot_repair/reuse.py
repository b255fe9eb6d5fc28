"""Fits of ``ot_repair``'s predictor and transport shared between candidates (calibration).

Calibration's cell candidates (the certified partition, the k-means cells, the partitions;
docs/calibration.md, "Search order") differ only in their cells: each pass's class predictor
and transport see the same rows, labels, seed and knobs, and on a set of 18,000 rows of 384-d
text they are most of a fit's CPU time. Inside :func:`shared_fits` a pass's fitted predictor
and transport, and the served chain's output on the fit rows (what source-valued cells
average), are kept and handed to the next fit whose inputs are the same, byte for byte: the
rows, the labels, the transport's random generator's state, the predictor's seed, the knobs
and the thread count make the key (the predictor seeds torch's global generator itself, so
its state before does not matter), and a hit sets both generators to where the fit had left
them, so a fit with the cache is the fit without it (tested bit for bit). Outside it nothing
is kept.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from copy import deepcopy
from typing import Any

import torch

from mass.methods.ot_repair.params import RepairParams

# the knobs a pass's predictor and transport read (the cells' knobs are not in the key)
PASS_KNOBS = ("steps", "knots", "hidden", "predictor_epochs", "min_class_rows", "informed",
              "renormalize")  # fmt: skip

# what one search keeps at most: a pass of 200,000 rows of 768-d (mass train's --max-rows)
# holds 0.6 GiB of transported rows, so the cache is bounded by bytes, not entries
MAX_BYTES = 1 << 30

_cache: OrderedDict[tuple, tuple[Any, int]] | None = None
_limit = 0
stats = {"hits": 0, "misses": 0}


@contextmanager
def shared_fits(max_bytes: int = MAX_BYTES) -> Iterator[None]:
    """Keep fitted passes while inside, up to ``max_bytes`` of tensors (least recently used
    dropped first; a pass larger than that is not kept); nested uses share the outer cache.
    Everything kept is dropped on leaving."""
    global _cache, _limit
    if _cache is not None:
        yield
        return
    _cache, _limit = OrderedDict(), max_bytes
    try:
        yield
    finally:
        _cache, _limit = None, 0


def _nbytes(value: Any) -> int:
    """The bytes of every tensor in ``value`` (tuples, lists, dataclasses, modules)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, torch.nn.Module):
        return sum(_nbytes(t) for t in value.state_dict().values())
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return sum(_nbytes(getattr(value, f)) for f in value.__dataclass_fields__)
    return 0


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def pass_key(x: torch.Tensor, y: torch.Tensor, k: int, seed: int, gen: torch.Generator,
             p: RepairParams) -> tuple | None:  # fmt: skip
    """The key of one pass's fit (None outside :func:`shared_fits`)."""
    if _cache is None:
        return None
    knobs = tuple(getattr(p, f) for f in PASS_KNOBS)
    return ("pass", _digest(x, y, gen.get_state()), k, seed, knobs, torch.get_num_threads())


def _get(key: tuple) -> Any:
    assert _cache is not None
    if key in _cache:
        _cache.move_to_end(key)
        stats["hits"] += 1
        return _cache[key][0]
    stats["misses"] += 1
    return None


def _put(key: tuple, value: Any) -> None:
    assert _cache is not None
    size = _nbytes(value)
    if size > _limit:
        return
    _cache[key] = (value, size)
    while sum(n for _, n in _cache.values()) > _limit:
        _cache.popitem(last=False)


def fitted_pass(key: tuple | None, gen: torch.Generator, fit: Callable[[], tuple]) -> tuple:
    """``fit()`` (it returns the pass's predictor, transport and transported rows), or a copy
    of what it returned for ``key`` before, both generators set as it left them."""
    if key is None:
        return fit()
    got = _get(key)
    if got is None:
        value = fit()
        got = (deepcopy(value), gen.get_state(), torch.get_rng_state())
        _put(key, got)
        return value
    value, gen_state, rng_state = got
    gen.set_state(gen_state)
    torch.set_rng_state(rng_state)
    return deepcopy(value)


def served_rows(keys: list[tuple | None], x: torch.Tensor,
                parts: list[torch.nn.Module]) -> torch.Tensor:  # fmt: skip
    """The fit rows ``x`` through the served ``parts`` (one per pass of ``keys``, whose inputs
    are in the first key), every prefix computed once inside :func:`shared_fits`: a one-pass
    chain's output is a two-pass chain's first step, so either reuses the other's (the
    same module forwards in the same order: bit for bit the rows without the cache)."""

    def run(z: torch.Tensor, mods: list[torch.nn.Module]) -> torch.Tensor:
        with torch.no_grad():
            for m in mods:
                z = m(z)
        return z

    # not one part per pass (never for source-valued cells, the only caller): not kept, so a
    # key always names the rows through exactly its passes
    if _cache is None or not keys or any(k is None for k in keys) or len(parts) != len(keys):
        return run(x, parts)
    start, z = 0, x
    for i in range(len(keys), 0, -1):  # the longest prefix served before
        got = _get(("served", *keys[:i]))
        if got is not None:
            start, z = i, got.clone()
            break
    for i in range(start, len(keys)):
        z = run(z, [parts[i]])
        _put(("served", *keys[: i + 1]), z.clone())
    return z
