"""Classes a modifier never saw at training are refused by name before any work.

``mass export`` records the classes of each suppressed and preserved attribute the modifier
was trained on (export.json ``classes``, from the run's encodings). A release row of a class
outside them is one the modifier's guarantee says nothing about: a suppressed class seen only
in the release is not erased (the audit would blame whatever column it reads best, the ids
included), and a preserved one is not kept. :func:`check_trained_classes` reads the label
columns of the job's input (or ``--labels``) and raises :class:`mass.errors.LabelError`
naming the file, column, value, its row count and first row, and the trained classes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass.errors import LabelError
from mass.io import expand_paths, read_table, refuse_null_labels


def _columns(spec: str) -> list[str]:
    import pyarrow.parquet as pq

    from mass import fs

    with fs.open_input(expand_paths(spec)[0]) as f:
        return list(pq.ParquetFile(f).schema_arrow.names)


def _lookup(known: list, typ: pa.DataType, src: str, attr: str) -> pa.Array:
    try:
        return pa.array(known, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    try:
        return pa.array([str(k) for k in known]).cast(typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise LabelError(
            f"{src}: label column '{attr}' is {typ}, but the model was trained on the classes "
            f"{known}; pass the labels it was trained with; nothing was read or published"
        ) from e


def check_trained_classes(info: dict, sources: list[str]) -> None:
    """For each attribute with recorded training classes, the first of ``sources`` (the labels
    file, then the input) holding its column must hold no other class."""
    classes = info.get("classes") or {}
    if not isinstance(classes, dict) or not classes:
        return
    found = {s: _columns(s) for s in sources if s}
    for attr, known in classes.items():
        src = next((s for s, cols in found.items() if attr in cols), None)
        if src is None:
            continue  # not in this job's data: nothing to compare (the audit needs it anyway)
        values = read_table(src, columns=[attr]).column(attr).combine_chunks()
        refuse_null_labels(values, attr, source=src)  # before any class is compared
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        lookup = _lookup(list(known), values.type, src, attr)
        unseen = pc.invert(pc.is_in(values, value_set=lookup)).fill_null(False)
        if not pc.any(unseen).as_py():
            continue
        row = int(np.flatnonzero(unseen.to_numpy(zero_copy_only=False))[0])
        first = values[row]
        count = int(pc.sum(pc.equal(values, first).cast(pa.int64())).as_py())
        others = pc.unique(values.filter(unseen)).to_pylist()
        raise LabelError(
            f"{src}: label column '{attr}' has value {first.as_py()!r} ({count} "
            f"row{'s' if count > 1 else ''}, first at row {row}), unseen at training time by model "
            f"'{info.get('name', '?')}' (trained classes: {list(known)}"
            f"{f'; other unseen values: {others[1:6]}' if len(others) > 1 else ''}); its "
            "guarantee says nothing about a class it never saw: retrain on data holding it, "
            "or leave those rows out; nothing was read or published"
        )
