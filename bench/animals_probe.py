"""A probe, not yet a benchmark set: `animal-mnist` 0.4 (MIT) as a ninth `mass bench realdata`
set, registered in process (docs/realdata.md, "Not covered"; journal realdata-2026-11-28.md,
"animal-mnist, a probe").

The wheel is not a dependency (it declares tensorflow): fetch it once with
``pip download --no-deps animal-mnist==0.4 -d DIR`` and pass its path in ``ANIMAL_MNIST_WHEEL``.
Its two files are gzip'd pickles of numpy arrays; they are never unpickled:
:func:`array_from_pickle` walks the opcodes on a symbolic stack (strings, ints, bytes, tuples,
the memo) and refuses any global but numpy's own ``_reconstruct`` / ``ndarray`` / ``dtype``
and any other opcode. The silhouettes (grey, white on black, replicated to RGB) are embedded
by the demo's extractor (``models/extractor/extractor.pt``, written by `make demo`).

S = the animal class (10); R and the watch attributes are each above its own class's median
(so independent of S by construction, as `words`' frequency): R = ink area (large for its
kind); watch = width / height, height of the ink's centre of mass, stroke thickness.

    python bench/animals_probe.py check          # shapes, class counts, V with S
    python bench/animals_probe.py bench ARGS...  # `mass bench realdata --only animals ARGS`
    python bench/animals_probe.py cells JSON     # bench/realdata_cells.py on it
"""

from __future__ import annotations

import gzip
import io
import os
import pickletools
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}  # numpy 1.x and 2.x spellings
# the element types a plain numeric array may hold (no object dtype: it would need pickles)
DTYPES = ("u1", "i1", "i2", "i4", "i8", "f4", "f8")


def array_from_pickle(raw: bytes, source: str) -> np.ndarray:
    """A numpy array from a pickle's opcodes read as data, on a symbolic stack: nothing is
    executed. Only the globals numpy's own ndarray pickle uses are allowed."""
    stack, memo, marks = [], {}, []
    for op, arg, _ in pickletools.genops(io.BytesIO(raw)):
        n = op.name
        if n in ("PROTO", "FRAME", "STOP"):
            continue
        if n in (
            "SHORT_BINUNICODE",
            "BINUNICODE",
            "SHORT_BINBYTES",
            "BINBYTES",
            "BINBYTES8",
            "BININT",
            "BININT1",
            "BININT2",
            "LONG1",
        ):
            stack.append(arg)
        elif n in ("NEWFALSE", "NEWTRUE", "NONE"):
            stack.append({"NEWFALSE": False, "NEWTRUE": True, "NONE": None}[n])
        elif n == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif n in ("BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif n in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif n == "STACK_GLOBAL":
            name, mod = stack.pop(), stack.pop()
            if (mod, name) not in ALLOWED:
                raise ValueError(f"{source}: the pickle names {mod}.{name}: refused")
            stack.append(("global", mod, name))
        elif n == "MARK":
            marks.append(len(stack))
        elif n == "TUPLE":
            at = marks.pop()
            stack[at:] = [tuple(stack[at:])]
        elif n in ("TUPLE1", "TUPLE2", "TUPLE3"):
            k = int(n[-1])
            stack[-k:] = [tuple(stack[-k:])]
        elif n == "EMPTY_TUPLE":
            stack.append(())
        elif n == "REDUCE":
            args, fn = stack.pop(), stack.pop()
            stack.append({"call": fn, "args": args, "state": None})
        elif n == "BUILD":
            state = stack.pop()
            stack[-1]["state"] = state
        else:
            raise ValueError(f"{source}: pickle opcode {n}: refused")
    (obj,) = stack
    if obj["call"][2] != "_reconstruct" or obj["args"][0][2] != "ndarray":
        raise ValueError(f"{source}: not an ndarray pickle")
    _, shape, dt, fortran, data = obj["state"]
    if dt["call"][2] != "dtype" or fortran or not isinstance(data, bytes):
        raise ValueError(f"{source}: unexpected ndarray state")
    order = dt["state"][1] if dt["state"] else "|"
    kind = dt["args"][0]
    if kind not in DTYPES:
        raise ValueError(f"{source}: dtype {kind!r}: refused")
    dtype = np.dtype(kind).newbyteorder("<" if order in "|<=" else ">")
    arr = np.frombuffer(data, dtype=dtype)
    if arr.size != int(np.prod(shape)):
        raise ValueError(f"{source}: {arr.size} values for shape {shape}")
    return arr.reshape(shape).astype(dtype.newbyteorder("="))


def read_animals():
    wheel = os.environ.get("ANIMAL_MNIST_WHEEL", "")
    if not os.path.exists(wheel):
        raise SystemExit(
            "animals_probe: set ANIMAL_MNIST_WHEEL to animal_mnist-0.4-py3-none-any"
            ".whl (pip download --no-deps animal-mnist==0.4)"
        )
    z = zipfile.ZipFile(wheel)
    base = "animal_mnist/data/Animal_MNIST/"
    x = array_from_pickle(gzip.decompress(z.read(base + "animal_data_version_3.gz")), "data")
    y = array_from_pickle(gzip.decompress(z.read(base + "animal_label_version_3.gz")), "labels")
    return x.reshape(len(y), 784).astype(np.uint8), y.astype(np.int64)


def attributes(grey: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    from mass.demo.coloured_mnist import INK, stroke_thickness

    img = grey.reshape(-1, 28, 28)
    ink = img >= INK
    area = ink.sum(axis=(1, 2))
    rows, cols = ink.any(axis=2), ink.any(axis=1)
    h = 28 - rows.argmax(1) - rows[:, ::-1].argmax(1)
    w = 28 - cols.argmax(1) - cols[:, ::-1].argmax(1)
    cy = (ink * np.arange(28)[None, :, None]).sum(axis=(1, 2)) / np.maximum(area, 1)
    thick = stroke_thickness(grey)

    def for_its_kind(v):  # above its own class's median: independent of S by construction
        out = np.zeros(len(v), np.int64)
        for k in np.unique(y):
            own = y == k
            out[own] = v[own] > np.median(v[own])
        return out

    return {
        "S": y.astype(np.int64),
        "large": for_its_kind(area),
        "wide": for_its_kind(w / np.maximum(h, 1)),
        "top_heavy": for_its_kind(-cy),
        "thick": for_its_kind(thick),
    }


def embed(grey: np.ndarray) -> np.ndarray:
    from mass.demo.extractor import embed_images, load_extractor

    rgb = np.repeat(grey.reshape(-1, 784, 1), 3, axis=2).reshape(-1, 2352).astype(np.uint8)
    return embed_images(load_extractor(os.path.join(ROOT, "models/extractor/extractor.pt")), rgb)


def register():
    import pandas as pd
    import realdata
    import realdata_sets as rs

    def loader():
        grey, y = read_animals()
        lab = attributes(grey, y)
        x = embed(grey)
        return rs.Raw(labels=lab, numeric=pd.DataFrame(x), note="prototype")

    spec = rs.Spec(
        "animals",
        "image",
        "animal-mnist 0.4 (silhouettes through the demo's CNN)",
        "MIT",
        "10,000 28x28 animal silhouettes in 10 classes, embedded by the demo's SimCLR CNN (128-d)",
        "animal class (10)",
        ("large",),
        "which animal is the identity-like attribute; its size for its kind (ink "
        "area above its class's median) is what a user keeps",
        {
            "wide": "wider for its kind (width / height above its class's median)",
            "top_heavy": "ink higher for its kind (centre of mass above its class's)",
            "thick": "thicker strokes for its kind",
        },
    )
    for d in (rs.REGISTRY, realdata.REGISTRY):
        d["animals"] = spec
    for d in (rs.LOADERS, realdata.LOADERS):
        d["animals"] = loader


def main(argv):
    os.environ.setdefault("MASS_LOCAL_CONFIG", "")
    if argv[0] == "check":
        grey, y = read_animals()
        print(grey.shape, grey.dtype, np.bincount(y))
        lab = attributes(grey, y)
        from mass.metrics.unnamed import cramers_v

        for k, v in lab.items():
            print(k, np.bincount(v)[:12], round(float(cramers_v(y, v)), 3) if k != "S" else "")
        return 0
    register()
    if argv[0] == "bench":
        import realdata_run

        return realdata_run.main(["--only", "animals", *argv[1:]])
    if argv[0] == "cells":
        import realdata_cells

        return realdata_cells.main(["animals", *argv[1:]])
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
