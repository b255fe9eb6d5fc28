"""``Suppressor``: `mass train` and the modifier it fits as a scikit-learn transformer.

    from mass.api import Suppressor
    sup = Suppressor(suppress="gender", preserve="age").fit(X, labels)  # calibrates
    Xp = sup.transform(X_new, ids=ids)   # what `mass anonymize` releases for these rows
    sup.export("triton_models", "mine")  # the signed Triton model `mass anonymize` serves

``fit`` is `mass train` itself: the arguments become that command's flags, parsed by its own
parser (:mod:`mass.commands.train`) and run by :func:`mass.training.train` on a Parquet copy of
the rows in a private directory, so the defaults (calibration to the audit policy, the
``--budget-minutes``, ./params.yaml's ``audit:`` section) and every refusal are the command's.
The fitted estimator keeps the bytes of ``modifier.pt``; ``transform`` loads them with the
weights-only loader (:func:`mass.modifiers.load_modifier`) and applies them as the served
adapter does, with the release noise keyed like `mass anonymize`'s (the owner key, the
rows' ids, the modifier's sha256), so the output equals the job's for the same rows.

Concept-erasure's split, scikit-learn's shape: what is fitted (``modifier_bytes_``) is apart
from how it was fitted (the run directory, kept only when ``run_dir`` is given).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from mass.api import frames

_MODELS: dict[str, object] = {}  # sha256 -> loaded modifier (a few, this process only)


class Suppressor(TransformerMixin, BaseEstimator):
    """Suppress attributes of embeddings, keep others: ``fit(X, labels)``, ``transform(X)``.

    Parameters (keyword names are `mass train`'s flags): ``suppress``, ``preserve``, ``watch``
    (attribute names, a list or "a,b"); ``method`` / ``config`` (a params.yaml) / ``mode``: an
    explicit fit, none of them: calibration (docs/calibration.md) under ``policy`` (a YAML
    with an ``audit:`` section; default ./params.yaml's, else the built-in defaults) within
    ``budget_minutes``; ``seed``, ``max_rows``; ``id_col`` / ``emb_col`` for Arrow and pandas
    inputs; ``noise_key_file``: the owner key that seeds a stochastic modifier's release noise
    (default as `mass anonymize`: $MASS_NOISE_KEY_FILE, then .mass/local.yaml); ``run_dir``:
    keep the training run there (else a private directory, removed after ``fit``).
    """

    def __init__(self, suppress=None, preserve=None, watch=None, *, method=None, config=None,
                 mode=None, policy=None, budget_minutes=10.0, max_rows=200_000, seed=None,
                 id_col="id", emb_col="emb", noise_key_file=None, run_dir=None):  # fmt: skip
        self.suppress = suppress
        self.preserve = preserve
        self.watch = watch
        self.method = method
        self.config = config
        self.mode = mode
        self.policy = policy
        self.budget_minutes = budget_minutes
        self.max_rows = max_rows
        self.seed = seed
        self.id_col = id_col
        self.emb_col = emb_col
        self.noise_key_file = noise_key_file
        self.run_dir = run_dir

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # the labels of the attributes are the point
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = ["float32"]  # the release's dtype, always
        return tags

    def _attributes(self) -> list[str]:
        return list(dict.fromkeys(frames.names(self.suppress) + frames.names(self.preserve)
                                  + frames.names(self.watch)))  # fmt: skip

    def _train_argv(self, data: str, out: str) -> list[str]:
        argv = ["--data", data, "--out", out, "--id-col", self.id_col, "--emb-col",
                self.emb_col, "--suppress", ",".join(frames.names(self.suppress)), "--no-progress",
                "--budget-minutes", str(self.budget_minutes), "--max-rows", str(self.max_rows)]  # fmt: skip
        for flag, value in (("--preserve", ",".join(frames.names(self.preserve))),
                            ("--watch", ",".join(frames.names(self.watch))), ("--method", self.method),
                            ("--config", self.config), ("--mode", self.mode),
                            ("--policy", self.policy),
                            ("--seed", None if self.seed is None else str(self.seed))):  # fmt: skip
            if value:
                argv += [flag, value]
        return argv

    def fit(self, X, y=None, *, ids=None):
        """Fit on rows ``X`` and their labels ``y`` (a dict, DataFrame or Arrow table of the
        suppress/preserve/watch columns; a 1-d array when one attribute is named). ``ids``:
        the rows' ids (default: ``X``'s ``id_col`` when it is a table, else 0..n-1)."""
        if not frames.names(self.suppress):
            raise ValueError("suppress: name at least one attribute, e.g. Suppressor('gender')")
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y "
                             f"is None: the labels of {self._attributes()}")  # fmt: skip
        x = frames.matrix(X, emb_col=self.emb_col)
        cols = frames.label_columns(y, self._attributes(), len(x), what="y")
        for name in frames.names(self.suppress) + frames.names(self.preserve):
            if len(pc.unique(cols[name])) < 2:
                raise ValueError(f"y: column '{name}' has one class only; it cannot be "
                                 "suppressed or preserved (needs two or more)")  # fmt: skip
        table = frames.embedding_table(x, self._ids(X, ids), id_col=self.id_col,
                                       emb_col=self.emb_col, labels=cols)  # fmt: skip
        tmp = frames.private_dir("mass-suppressor-")
        try:
            out = self.run_dir or os.path.join(tmp, "run")
            self._fit_run(frames.write_private(table, tmp, "train"), out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.n_features_in_ = int(x.shape[1])
        return self

    def _fit_run(self, data: str, out: str) -> None:
        """`mass train` on ``data`` into ``out``, then the fitted attributes from ``out``."""
        from mass import rundir
        from mass.cli import parse_command, run_command
        from mass.modifiers import load_modifier, modifier_meta
        from mass.safe_load import plain

        # `mass train`'s own parser and flag contract (mass.cli), then its run
        run_command(*parse_command(["train", *self._train_argv(data, out)]))
        path = os.path.join(out, rundir.MODIFIER)
        with open(path, "rb") as f:
            self.modifier_bytes_ = f.read()
        self.sha256_ = hashlib.sha256(self.modifier_bytes_).hexdigest()
        meta = modifier_meta(path)
        model: Any = load_modifier(path)  # any registered kind: its spec has to_dict()
        self.method_ = meta.get("method")
        self.stochastic_ = bool(getattr(model, "stochastic", True))
        self.calibration_ = meta.get("calibration")
        self.metrics_ = rundir.read_metrics(out)
        self.record_ = {  # what export.json records of the model (mass.serving.export)
            "method": self.method_, "suppress": list(meta.get("suppress") or []),
            "preserve": list(meta.get("preserve") or []),
            "config_hash": meta.get("config_hash"), "stochastic": self.stochastic_,
            "modifier": {"kind": getattr(model, "kind", None),
                         "spec": plain(model.spec.to_dict())},
        }  # fmt: skip
        _MODELS[self.sha256_] = model

    def _ids(self, X, ids):
        if ids is not None:
            return ids
        table = frames.as_table(X, what="X", need=(self.id_col,))
        if table is not None and self.id_col in table.column_names:
            return table.column(self.id_col)
        return None

    def _model(self):
        model = _MODELS.get(self.sha256_)
        if model is None:
            import tempfile

            from mass.modifiers import load_modifier

            with tempfile.TemporaryDirectory(prefix="mass-suppressor-") as tmp:
                path = os.path.join(tmp, "modifier.pt")
                with open(path, "wb") as f:
                    f.write(self.modifier_bytes_)
                model = load_modifier(path)  # weights only, no pickle
            if len(_MODELS) >= 8:
                _MODELS.clear()
            _MODELS[self.sha256_] = model
        return model

    def _seeds(self, ids, n: int) -> np.ndarray:
        """ROW_SEED of `mass anonymize`: the owner-keyed PRF of the ids, bound to this
        modifier's sha256; zeros for a deterministic modifier (which ignores them)."""
        from mass.keys import NOISE_KEY_ENV, looked_for, resolve_key
        from mass.noise import keyed_row_seeds

        key = resolve_key(self.noise_key_file, NOISE_KEY_ENV)
        if not self.stochastic_:
            if key is None or ids is None:
                return np.zeros(n, np.int64)
        elif key is None or ids is None:
            need = "the owner key (noise_key_file=, or " + looked_for(NOISE_KEY_ENV) + ")"
            raise ValueError(f"this modifier ({self.method_}) adds release noise keyed by the "
                             f"rows' ids: transform needs {need if key is None else 'ids='} "
                             "(the rows' unique ids, or an id_col column in X)")  # fmt: skip
        return keyed_row_seeds(ids, key, context=self.sha256_)

    def transform(self, X, *, ids=None):
        """The privatized rows, the type of ``X``: an array for an array, a DataFrame for a
        numeric DataFrame, ``id_col`` + ``emb_col`` for an Arrow table (with the release's
        ``mass.*`` metadata, :meth:`release_metadata`) or a DataFrame with an embedding column
        (nothing else of the input is carried over)."""
        from mass.modifiers import modify

        check_is_fitted(self, "modifier_bytes_")
        x = frames.matrix(X, emb_col=self.emb_col)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {x.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input.")  # fmt: skip
        ids = self._ids(X, ids)
        if ids is not None:
            frames.check_ids(ids, column=self.id_col)
        out = modify(self._model(), x, self._seeds(ids, len(x)))
        arrow = isinstance(X, (pa.Table, pa.RecordBatch))
        return _like(X, out, ids, id_col=self.id_col, emb_col=self.emb_col,
                     meta=self.release_metadata() if arrow else {})  # fmt: skip

    def export(self, repository: str, name: str, *, signing_key_file: str | None = None,
               version: int | None = None) -> dict:  # fmt: skip
        """`mass export`: the fitted modifier as signed Triton model ``name`` of
        ``repository`` (the owner key: ``signing_key_file``, else $MASS_SIGNING_KEY_FILE,
        else .mass/local.yaml); returns name, version, path and sha256."""
        from mass.serving.export import export_kind

        check_is_fitted(self, "modifier_bytes_")
        tmp = frames.private_dir("mass-export-")
        try:
            path = os.path.join(tmp, "modifier.pt")
            with open(path, "wb") as f:
                f.write(self.modifier_bytes_)
            return export_kind("modifier", repository, name, run_dir=path,
                               signing_key_file=signing_key_file, version=version)  # fmt: skip
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def near_recompute(self):
        """This modifier as the audit's recompute of a release's near rows
        (:class:`mass.audit.recompute.NearRecompute`, with the seeds :meth:`transform` uses)."""
        from mass.audit.recompute import NearRecompute

        check_is_fitted(self, "modifier_bytes_")

        def seeds(ids) -> np.ndarray:
            try:
                return self._seeds(ids, len(ids))
            except ValueError:  # noisy and no key: nothing recomputed agrees, nothing passes
                return np.zeros(len(ids), np.int64)

        return NearRecompute(_Outputs(self), seeds)

    def release_metadata(self) -> dict[bytes, bytes]:
        """The ``mass.*`` schema metadata of a release part of this model's rows, as `mass
        anonymize` writes it (unaudited, served by no model name; the noise key's fingerprint
        when one is found): what the audit reads to judge the key-compromised view."""
        from mass.keys import NOISE_KEY_ENV, resolve_key
        from mass.release.columns import release_metadata

        check_is_fitted(self, "modifier_bytes_")
        key = resolve_key(self.noise_key_file, NOISE_KEY_ENV)
        info = {"name": "", "version": "", "sha256": self.sha256_, **self.record_}
        return release_metadata(info, audited=False,
                                noise_key_fingerprint=key.fingerprint if key else "")  # fmt: skip

    def summary(self) -> str:
        """What calibration chose (or the explicit method), as JSON text."""
        check_is_fitted(self, "modifier_bytes_")
        return json.dumps({"method": self.method_, "stochastic": self.stochastic_,
                           "calibration": self.calibration_}, indent=2, default=str)  # fmt: skip


def _like(X, out: np.ndarray, ids, *, id_col: str, emb_col: str, meta: dict):
    """``out`` in the shape of the input ``X`` (see :meth:`Suppressor.transform`)."""
    table = frames.as_table(X, what="X", need=())  # only: is X a table?
    if table is None:
        if frames.is_pandas(X):
            import pandas as pd

            return pd.DataFrame(out, index=X.index, columns=X.columns)
        return out
    result = frames.embedding_table(out, ids, id_col=id_col, emb_col=emb_col)
    if isinstance(X, (pa.Table, pa.RecordBatch)):
        return result.replace_schema_metadata(meta)
    return result.to_pandas()


class _Outputs:
    """A fitted :class:`Suppressor`'s modifier as ``outputs(x, seeds)``, what the audit's
    recompute calls (:class:`mass.batches.reference.ReferenceCheck` for a served export)."""

    def __init__(self, sup: Suppressor) -> None:
        self.sup = sup

    def outputs(self, x: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        from mass.modifiers import modify

        return modify(self.sup._model(), x, seeds)
