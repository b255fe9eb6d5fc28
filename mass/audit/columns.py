"""Released columns as an attacker reads them: structure and out-of-fold per-value statistics.

One encoder for every judge of a column that is not the embedding (the up-front proxy check
of ``--allow-columns``, :mod:`mass.batches.allow_check`, and the audit, :mod:`mass.audit.runner`,
ids included). A one-hot of the most frequent values misses a column whose information is in
its rare values or its arithmetic (``zip = 10000 + 4k + 2*gender``, 1,241 gender-specific first
names, ids assigned in blocks per class, ``F-00001``/``M-00002``), so each column gives:

- target-independent features (:func:`column_codes`): the audit's one-hot/standardised
  encoding (:func:`mass.audit.data.encode_columns`); for integers (and the trailing number of
  a string) the value, its rank, its low bits and its value mod small numbers; for strings the
  length and the share of letters, digits and other characters;
- *keys* (integer codes per row): the value itself, integers mod small numbers and every
  prime up to 100, string prefixes and suffixes, each character position (the first 24 and
  the last 4: a fiscal code's day-of-birth field), tokens split on non-alphanumerics, the
  character-class pattern (``F-00001`` -> ``A-9``); keys that are constant, unique per row or
  a repeat of an earlier key's partition are left out (they carry no statistics);
- an *order* (numbers, trailing numbers) along which neighbours are looked up (block position).

:func:`target_statistics` turns keys and order into the label statistics an attacker would
tabulate: per key value, the class frequencies of the rows with that value, and per row the
class frequencies of its nearest rows in the order. They are computed OUT OF FOLD (stratified
folds; a row's statistics come only from rows of the other folds, smoothed towards the class
prior of all rows, a constant): a row's own label never enters its own features, so a column
that says nothing about the label cannot score above chance through them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# value mod m: parity, blocks, check digits; every prime up to 100 (``id mod 11`` schemes)
PRIMES = tuple(p for p in range(2, 101) if all(p % d for d in range(2, int(p**0.5) + 1)))
MODULI = tuple(sorted({*PRIMES, 4, 6, 8, 10, 12, 16, 100}))
POSITIONS = 24  # string characters judged one by one from the start (fiscal-code-like fields)
FROM_END = 4  # ... and from the end
BITS = 4  # the lowest bits of an integer as 0/1 features
WINDOW = 8  # neighbours on each side in the order (block position)
SMOOTH = 2.0  # pseudo-rows of the class prior added to each value's counts
AFFIXES = (1, 2, 3)  # string prefix / suffix lengths
TOKENS = 3  # first tokens (and the last) split on non-alphanumerics


@dataclass(frozen=True)
class ColumnCodes:
    """One column, target-independent: ``dense`` [N, m] features, ``keys`` name -> int codes
    [N] (per-value statistics), ``order`` [N] float or None (neighbour statistics)."""

    dense: np.ndarray
    keys: dict[str, np.ndarray]
    order: np.ndarray | None


def _codes(arr: pa.Array) -> np.ndarray:
    """Integer code per distinct value (null is a value of its own)."""
    enc = pc.dictionary_encode(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
    return pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _rank(v: np.ndarray) -> np.ndarray:
    out = np.empty(v.size, dtype=np.float64)
    out[np.argsort(v, kind="stable")] = np.arange(v.size) / max(v.size - 1, 1)
    return out


def _std(v: np.ndarray) -> np.ndarray:
    s = v.std()
    return (v - v.mean()) / (s if s > 0 else 1.0)


def _int_values(arr: pa.Array) -> np.ndarray:
    """An integer or boolean column as int64 (nulls 0), or as uint64 when it holds values past
    int64's range."""
    if pa.types.is_uint64(arr.type) and (pc.max(arr).as_py() or 0) > np.iinfo(np.int64).max:
        return pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
    return pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)


def _order(v: np.ndarray) -> np.ndarray:
    """The neighbours' order of integers: their value, or past 2**53 (where float64 would tie
    neighbours) their rank among the distinct values."""
    if np.abs(v.astype(np.float64)).max(initial=0) < 2.0**53:
        return v.astype(np.float64)
    return np.unique(v, return_inverse=True)[1].reshape(-1).astype(np.float64)


def _integer(v: np.ndarray, missing: np.ndarray, prefix: str):
    """(dense features, keys) of int64 (or uint64) values ``v`` (``missing`` rows hold 0); the
    rank, bits and residues are exact at any width, ids past 2**53 included."""
    dense = [_std(v.astype(np.float64)), _rank(v)]
    dense += [((v >> b) & 1).astype(np.float64) for b in range(BITS)]
    dense += [np.mod(v, m).astype(np.float64) / m for m in MODULI]
    keys = {f"{prefix}mod{m}": np.where(missing, -1, np.mod(v, m).astype(np.int64))
            for m in MODULI}  # fmt: skip
    if missing.any():
        dense.append(missing.astype(np.float64))
    return np.stack(dense, axis=1), keys


def _strings(arr: pa.Array):
    """(dense features, keys, trailing number or None) of a string column."""
    s = pc.fill_null(arr, "")
    keys = {"value": _codes(arr)}
    for n in AFFIXES:
        keys[f"prefix{n}"] = _codes(pc.utf8_slice_codeunits(s, 0, n))
        keys[f"suffix{n}"] = _codes(pc.utf8_slice_codeunits(pc.utf8_reverse(s), 0, n))
    longest = int(pc.max(pc.utf8_length(s)).as_py() or 0)
    for i in range(min(POSITIONS, longest)):  # each character position on its own
        keys[f"char{i}"] = _codes(pc.utf8_slice_codeunits(s, i, i + 1))
    for i in range(min(FROM_END, longest)):
        keys[f"char-{i + 1}"] = _codes(pc.utf8_slice_codeunits(pc.utf8_reverse(s), i, i + 1))
    tokens = pc.split_pattern_regex(s, r"[^0-9A-Za-z]+")
    for i in range(TOKENS):
        keys[f"token{i}"] = _codes(pc.list_flatten(pc.list_slice(tokens, i, i + 1, 1,
                                                             return_fixed_size_list=True)))  # fmt: skip
    keys["token_last"] = _codes(pc.utf8_reverse(pc.list_element(
        pc.split_pattern_regex(pc.utf8_reverse(s), r"[^0-9A-Za-z]+", max_splits=1), 0)))  # fmt: skip
    pattern = pc.replace_substring_regex(s, r"[A-Za-z]+", "A")
    pattern = pc.replace_substring_regex(pattern, r"[0-9]+", "9")
    keys["pattern"] = _codes(pattern)
    length = pc.utf8_length(s).to_numpy(zero_copy_only=False).astype(np.float64)
    shares = []
    for rx in (r"[A-Za-z]", r"[0-9]", r"[^0-9A-Za-z]"):
        count = pc.count_substring_regex(s, rx).to_numpy(zero_copy_only=False)
        shares.append(count / np.maximum(length, 1.0))
    dense = [_std(length), *shares]
    tail = pc.struct_field(pc.extract_regex(s, r"(?P<n>[0-9]{1,18})$"), "n")
    has = tail.is_valid().to_numpy(zero_copy_only=False)
    number = None
    if has.any():
        number = pc.fill_null(tail, "0").cast(pa.int64()).to_numpy(zero_copy_only=False)
        d, k = _integer(number, ~has, "tail_")
        dense.append(d)
        keys.update(k)
        number = np.where(has, number, -1).astype(np.float64)
    return np.column_stack(dense), keys, number


def column_codes(arr: pa.Array, *, max_levels: int = 32) -> ColumnCodes:
    """The target-independent encoding of one released column (see the module docstring)."""
    from mass.audit.data import encode_columns

    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    n, typ = len(arr), arr.type
    base = encode_columns({"c": arr}, n, max_levels=max_levels).astype(np.float64)
    nested = pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(
        typ) or pa.types.is_struct(typ) or pa.types.is_map(typ)  # fmt: skip
    blocks, keys, order = [base], ({} if nested else {"value": _codes(arr)}), None
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        missing = arr.is_null().to_numpy(zero_copy_only=False)
        v = _int_values(arr)
        d, k = _integer(v, missing, "")
        blocks.append(d)
        keys.update(k)
        order = np.where(missing, np.nan, _order(v))
    elif pa.types.is_floating(typ) or pa.types.is_temporal(typ) or pa.types.is_decimal(typ):
        try:
            order = arr.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            order = arr.cast(pa.int64()).cast(pa.float64()).to_numpy(zero_copy_only=False)
    elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
        d, k, order = _strings(arr.cast(pa.string()))
        blocks.append(d)
        keys.update(k)
    # lists (a copy of an embedding) and anything else: the audit's encoding only
    dense = np.hstack([b.reshape(n, -1) for b in blocks])
    return ColumnCodes(dense=np.nan_to_num(dense), keys=keys, order=order)


def _fold_of(y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold of each row: stratified (each class dealt round-robin after a seeded shuffle)."""
    out = np.empty(y.size, dtype=np.int64)
    rng = np.random.default_rng(seed + 0x7A26)
    for c in np.unique(y):
        at = rng.permutation(np.flatnonzero(y == c))
        out[at] = np.arange(at.size) % folds
    return out


def _per_value(code_tr, onehot_tr, code_q, prior) -> np.ndarray:
    """Smoothed class frequencies, among the training rows, of each query row's value."""
    size = int(max(code_tr.max(initial=-1), code_q.max(initial=-1))) + 1
    counts = np.zeros((size, onehot_tr.shape[1]))
    np.add.at(counts, code_tr, onehot_tr)
    got = counts[code_q]
    return (got + SMOOTH * prior) / (got.sum(axis=1, keepdims=True) + SMOOTH)


def _neighbours(order_tr, onehot_tr, order_q, prior) -> np.ndarray:
    """Class frequencies of the ``WINDOW`` training rows on each side of each query row."""
    srt = np.argsort(order_tr, kind="stable")
    keys = order_tr[srt]
    cum = np.vstack([np.zeros((1, onehot_tr.shape[1])), np.cumsum(onehot_tr[srt], axis=0)])
    pos = np.searchsorted(keys, order_q)
    lo, hi = np.clip(pos - WINDOW, 0, keys.size), np.clip(pos + WINDOW, 0, keys.size)
    return (cum[hi] - cum[lo] + SMOOTH * prior) / ((hi - lo)[:, None] + SMOOTH)


@dataclass(frozen=True)
class Statistics:
    """The keys and orders of released columns, turned into label statistics per attacker
    split (:meth:`split`): never from the rows an attacker is scored on."""

    keys: tuple[np.ndarray, ...]  # int codes 0..K-1 per row
    orders: tuple[np.ndarray, ...]  # finite floats per row

    @classmethod
    def of(cls, codes: list[ColumnCodes]) -> Statistics:
        keys, orders, seen = [], [], set()
        for c in codes:
            for k in c.keys.values():
                code = np.unique(k, return_inverse=True)[1].reshape(-1)
                n_values = int(code.max(initial=-1)) + 1
                # a constant key, or one with a value per row, has no statistics (every row
                # gets the prior out of fold); a key that splits the rows like an earlier one
                # (char0 and prefix1) repeats its statistics: each is left out
                if n_values <= 1 or n_values >= code.size:
                    continue
                first = np.unique(code, return_index=True)[1]
                canon = np.argsort(np.argsort(first))[code]  # codes in order of first use
                digest = hash(canon.tobytes())
                if digest in seen:
                    continue
                seen.add(digest)
                keys.append(code)
            if c.order is not None:
                o = c.order
                fin = np.isfinite(o)
                orders.append(np.where(fin, o, (o[fin].min() - 1) if fin.any() else 0.0))
        return cls(tuple(keys), tuple(orders))

    @property
    def empty(self) -> bool:
        return not self.keys and not self.orders

    def take(self, rows) -> Statistics:
        return Statistics(tuple(k[rows] for k in self.keys), tuple(o[rows] for o in self.orders))

    def _fit(self, tr, y_tr, q, classes) -> np.ndarray:
        onehot = (y_tr[:, None] == classes[None, :]).astype(np.float64)
        prior = onehot.mean(axis=0)
        cols = [_per_value(k[tr], onehot, k[q], prior) for k in self.keys]
        cols += [_neighbours(o[tr], onehot, o[q], prior) for o in self.orders]
        # frequencies sum to 1 (the first class is implied); centred on the prior
        return np.hstack([c[:, 1:] - prior[1:] for c in cols]) if cols else np.zeros((q.size, 0))

    def split(self, y, train, test, *, folds: int, seed: int):
        """(features of the ``train`` rows, of the ``test`` rows) for labels ``y`` (all rows).

        Test rows: statistics of all training rows. Training rows: out of fold within the
        training part (``folds`` stratified folds), so a row's own label never enters its own
        features and the attacker is not trained on statistics it will not have at test time.
        """
        y = np.asarray(y)
        classes = np.unique(y[train])
        te = self._fit(train, y[train], test, classes)
        tr = np.zeros((train.size, te.shape[1]))
        n = int(max(2, min(folds, train.size)))
        inner = _fold_of(y[train], n, seed)
        for f in range(n):
            q = inner == f
            if q.any() and (~q).any():
                rest = train[~q]
                tr[q] = self._fit(rest, y[rest], train[q], classes)
        return tr.astype(np.float32), te.astype(np.float32)


def encode_released(columns: dict[str, pa.Array], *, max_levels: int) -> dict[str, Released]:
    """Each released column (name -> array) as :class:`Released` features."""
    out = {}
    for name, arr in columns.items():
        codes = column_codes(arr, max_levels=max_levels)
        out[name] = Released(dense=_unit_block(codes.dense), stats=Statistics.of([codes]))
    return out


@dataclass(frozen=True)
class Released:
    """One released column (or several, :func:`combine`) as attacker features: ``dense``
    float32 [N, m], scaled to unit mean squared row norm, and label ``stats``."""

    dense: np.ndarray
    stats: Statistics


def combine(parts: list[Released], n_rows: int) -> Released:
    dense = [p.dense for p in parts]
    return Released(
        dense=np.hstack(dense) if dense else np.zeros((n_rows, 0), np.float32),
        stats=Statistics(tuple(k for p in parts for k in p.stats.keys),
                         tuple(o for p in parts for o in p.stats.orders)),
    )  # fmt: skip


def _unit_block(m: np.ndarray) -> np.ndarray:
    mean, std = m.mean(axis=0), m.std(axis=0)
    keep = std > 0
    block = (m[:, keep] - mean[keep]) / std[keep]
    scale = np.sqrt(np.mean(np.sum(block**2, axis=1))) if block.size else 0.0
    return (block / scale if scale > 0 else block).astype(np.float32)
