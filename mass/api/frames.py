"""In-memory tables (numpy, pandas, Arrow) as the data contract's Arrow tables.

The Python entry points (:class:`mass.api.suppressor.Suppressor`, :func:`mass.api.report.
audit_release`) take what a notebook holds and hand the same code as the commands an Arrow
table with an id column, a fixed-size-list float32 embedding column and label columns (or a
Parquet file of it in a private directory, :func:`write_private`). Every refusal is a
``ValueError`` (scikit-learn's contract) naming the argument, the row or the column.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np
import pyarrow as pa

from mass.errors import InputError, first_null
from mass.io import check_ids as io_check_ids
from mass.io import refuse_continuous_labels, refuse_null_labels
from mass.names import parse_names


def names(v) -> list[str]:
    """Attribute names given as "a,b" or any iterable of names (None: none), read by
    :func:`mass.names.parse_names` (an iterable's items as ``str``: a pandas Index works)."""
    items = v if v is None or isinstance(v, str) else [str(s) for s in v]
    return list(parse_names(items, where="attribute names"))


def is_pandas(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "pandas"


def as_table(obj, *, what: str, need=None) -> pa.Table | None:
    """An Arrow table of ``obj`` when it is one (a Table, RecordBatch or pandas DataFrame whose
    columns are not all numeric), else None (a matrix).

    A DataFrame column Arrow cannot hold as one type (an object column mixing ints and text)
    is refused by name when it is one of ``need`` (None: every column), and otherwise left
    out: an unused column never stops a fit."""
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if isinstance(obj, pa.Table):
        return obj
    if is_pandas(obj) and hasattr(obj, "columns"):
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        # pandas' own test: its extension dtypes (str, category, boolean, Int64) are no numpy
        # dtypes, and a column of booleans or strings is a label, not a coordinate
        numeric = all(is_numeric_dtype(t) and not is_bool_dtype(t) for t in obj.dtypes)
        return None if numeric else _from_pandas(obj, what=what, need=need)
    return None


def _from_pandas(df, *, what: str, need) -> pa.Table:
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass  # find the column: refuse it by name if it is needed, else leave it out
    dup = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if dup:
        raise ValueError(f"{what}: column names {dup} appear more than once; rename them")
    keep = []
    for pos, c in enumerate(df.columns):
        try:
            pa.Table.from_pandas(df.iloc[:, [pos]], preserve_index=False)
        except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
            if need is None or str(c) in need:
                raise ValueError(_mixed(df.iloc[:, pos], str(c), what=what)) from e
            continue
        keep.append(pos)
    return pa.Table.from_pandas(df.iloc[:, keep], preserve_index=False)


def _mixed(col, name: str, *, what: str) -> str:
    """Why Arrow cannot hold ``col``: the first two rows whose values differ in type."""
    seen: dict[type, int] = {}
    for row, v in enumerate(col.tolist()):
        if v is None or (isinstance(v, float) and v != v):
            continue
        kind = bool if isinstance(v, (bool, np.bool_)) else type(v)
        seen.setdefault(kind, row)
        if len(seen) == 2:
            (a, ra), (b, rb) = seen.items()
            return (f"{what}: column '{name}' mixes types: row {ra} is {a.__name__} "
                    f"({col.iloc[ra]!r}), row {rb} is {b.__name__} ({col.iloc[rb]!r}); "
                    "give the column one type (e.g. .astype(str))")  # fmt: skip
    return f"{what}: column '{name}' ({col.dtype}) cannot be read as one Arrow type"


def matrix(x, *, what: str = "X", emb_col: str = "emb") -> np.ndarray:
    """``x`` as a finite float32 [n, d] matrix: a 2-d array (numpy, pandas, lists), an Arrow
    table/batch or DataFrame holding ``emb_col``, or an Arrow (fixed-size) list array."""
    table = as_table(x, what=what, need=(emb_col,))
    if table is not None:
        if emb_col not in table.column_names:
            raise ValueError(f"{what}: no embedding column '{emb_col}' (columns: "
                             f"{table.column_names}); pass emb_col=")  # fmt: skip
        x = table.column(emb_col).combine_chunks()
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    if isinstance(x, pa.Array):
        x = _list_matrix(x, what=what)
    from sklearn.utils.validation import check_array

    # scikit-learn's own checks and messages: sparse, complex, 1-d, empty, object dtype
    out = check_array(x, dtype=[np.float32, np.float64], ensure_all_finite=False,
                      input_name=what)  # fmt: skip
    # C order, float32, writable: a column-major frame would take another BLAS path (rows
    # then differ from the job's in the last bit)
    out = np.array(out, dtype=np.float32, order="C")
    bad = ~np.isfinite(out)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{what}: row {row} column {col} is {out[row, col]} (NaN or infinity; "
                         f"{int(bad.any(axis=1).sum())} rows in all); clean the rows first")  # fmt: skip
    return out


def _list_matrix(arr: pa.Array, *, what: str) -> np.ndarray:
    if pa.types.is_fixed_size_list(arr.type):
        width = arr.type.list_size
    elif pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        _refuse_nulls(arr, what=what)
        lengths = set(arr.value_lengths().to_pylist())
        if len(lengths) != 1:
            raise ValueError(f"{what}: embedding rows of different lengths {sorted(lengths)}")
        width = lengths.pop()
    else:
        raise ValueError(f"{what}: an Arrow {arr.type} is no embedding (a list of floats)")
    _refuse_nulls(arr, what=what)
    return arr.flatten().to_numpy(zero_copy_only=False).reshape(len(arr), width)


def _refuse_nulls(arr: pa.Array, *, what: str) -> None:
    if arr.null_count:
        row = first_null(arr)
        raise ValueError(f"{what}: row {row} is null; drop or fill it first")


def label_columns(labels, names: list[str], n: int, *, what: str = "labels") -> dict:
    """``{name: Arrow array}`` of the ``names`` columns of ``labels``: a mapping, a pandas
    DataFrame or an Arrow table; a 1-d array-like is the one attribute when ``names`` is one."""
    table = as_table(labels, what=what, need=names)
    if table is None and is_pandas(labels) and hasattr(labels, "columns"):
        table = pa.Table.from_pandas(labels, preserve_index=False)
    if table is not None:
        labels = {c: table.column(c) for c in table.column_names}
    if not isinstance(labels, dict):
        arr = np.asarray(labels)
        if arr.ndim != 1 or len(names) != 1:
            raise ValueError(f"{what}: a {arr.ndim}-d array holds one attribute; name "
                             f"{names} as a dict or DataFrame of columns instead")  # fmt: skip
        labels = {names[0]: arr}
    out = {}
    for name in names:
        if name not in labels:
            raise ValueError(f"{what}: no column '{name}' (has {sorted(labels)})")
        col = labels[name]
        col = col if isinstance(col, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(col))
        if len(col) != n:
            raise ValueError(f"{what}: column '{name}' has {len(col)} rows, X has {n}")
        if pa.types.is_dictionary(col.type):  # a pandas 'category': its values are the classes
            col = col.cast(col.type.value_type)
        with _as_value_error():
            refuse_null_labels(col, name, source=what)
        out[name] = _classes(col, name, what=what)
    return out


def _classes(col, name: str, *, what: str):
    """A float label column whose values are all whole numbers (pandas turns ints into floats)
    as int64; any other float column is refused (classes, not measurements:
    :func:`mass.io.refuse_continuous_labels`, as a ValueError)."""
    if not pa.types.is_floating(col.type):
        return col
    with _as_value_error():
        refuse_continuous_labels(pa.array(col) if not isinstance(col, pa.Array) else col,
                                 name, source=what)  # fmt: skip
    v = col.to_numpy(zero_copy_only=False) if hasattr(col, "to_numpy") else np.asarray(col)
    return pa.array(v.astype(np.int64))


def embedding_table(x: np.ndarray, ids, *, id_col: str, emb_col: str,
                    labels: dict | None = None) -> pa.Table:  # fmt: skip
    """The data contract's table: ``id_col``, ``emb_col`` (fixed-size list float32), labels."""
    n, d = x.shape
    ids = pa.array(np.arange(n, dtype=np.int64)) if ids is None else ids
    if not isinstance(ids, (pa.Array, pa.ChunkedArray)):
        ids = pa.array(np.asarray(ids))
    if len(ids) != n:
        raise ValueError(f"ids: {len(ids)} ids for {n} rows")
    check_ids(ids, column=id_col)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), pa.float32()), d)
    cols = {id_col: ids, emb_col: emb, **(labels or {})}
    return pa.table(cols)


def check_ids(ids, *, column: str) -> None:
    """Refuse null or repeated ids, naming the rows, as `mass anonymize` does
    (:func:`mass.io.check_ids`): every row's seed and join is its id (two rows of one id would
    share their release noise)."""
    arr = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(ids, from_pandas=True)
    with _as_value_error():
        io_check_ids(pa.table({column: arr}), column, source="ids")


@contextlib.contextmanager
def _as_value_error():
    """The shared readers' refusals (:class:`mass.errors.InputError`) as the ``ValueError``
    scikit-learn's contract asks of an estimator given bad data."""
    try:
        yield
    except InputError as e:
        raise ValueError(str(e)) from e


def write_private(table: pa.Table, directory: str, name: str) -> str:
    """``table`` as ``directory/name.parquet`` (a directory this process made, 0700)."""
    import pyarrow.parquet as pq

    path = os.path.join(directory, f"{name}.parquet")
    pq.write_table(table, path)
    return path


def private_dir(prefix: str) -> str:
    """A new 0700 temporary directory (the caller removes it)."""
    return tempfile.mkdtemp(prefix=prefix)
