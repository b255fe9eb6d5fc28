"""What every handler of this package shares: one ``pa.RecordBatch`` in, one out.

Same contract as ``apache_beam.ml.inference``: a handler loads a "model" once per worker
(``load_model``; for Triton, one client, :mod:`mass.serving.triton_client`) and
``run_inference`` applies it; use it with ``RunInference(handler)``. Batching is skipped because
every element already is a batch of ``--batch-rows`` rows. Backends, one module each as in
Beam: :mod:`.triton` (a remote server) and :mod:`.function` (a Python function, in-process).
Both validate the response (shape ``[n, d]``, float32, finite) and raise
:class:`mass.errors.ResponseShapeError` instead of writing a batch they could not modify.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from mass.noise import KeyedSeeds
from mass.serving.tensors import ModifierInputs, Tensors, check_response, with_output_column

NAMESPACE = "mass"


class ArrowBatchInference:
    """RecordBatch plumbing shared by the handlers (inputs, validation, output column)."""

    def _init_arrow(
        self,
        *,
        model: str,
        inputs: Callable[[pa.RecordBatch], Tensors],
        output_col: str,
        output_dim: int | None,
        keep_input_as: str | None,
        input_col: str | None,
    ) -> None:
        self.model_name = model
        self._inputs = inputs
        self._output_col = output_col
        self._output_dim = output_dim
        self._keep_input_as = keep_input_as
        self._input_col = input_col or output_col
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._rows_out = Metrics.counter(NAMESPACE, "rows_out")
        self._batches = Metrics.counter(NAMESPACE, "batches")

    @property
    def output_dim(self) -> int | None:
        """The output dimension the handler checks responses against (None: not known)."""
        return self._output_dim

    @property
    def input_copy(self) -> str | None:
        """The column the model's input is kept in beside its output (``keep_input_as``)."""
        return self._keep_input_as

    def with_row_seeds(self, seeds: KeyedSeeds | None):
        """A copy whose :class:`ModifierInputs` send ``ROW_SEED = seeds(ids)`` (the job's key);
        other input builders (extractors take no seed) are kept as they are."""
        if not isinstance(self._inputs, ModifierInputs):
            return self
        handler = copy.copy(self)
        handler._inputs = self._inputs.with_seeds(seeds)
        return handler

    def _apply(self, batch: pa.RecordBatch, infer: Callable[[Tensors], np.ndarray]):
        self._rows_in.inc(batch.num_rows)
        out = check_response(
            infer(self._inputs(batch)),
            rows=batch.num_rows,
            dim=self._output_dim,
            model=self.model_name,
        )
        result = with_output_column(batch, out, output_col=self._output_col,
                                    keep_input_as=self._keep_input_as,
                                    input_col=self._input_col)  # fmt: skip
        self._batches.inc()
        self._rows_out.inc(result.num_rows)
        return result

    def _each(self, batch, infer) -> list[pa.RecordBatch]:
        batches = [batch] if isinstance(batch, pa.RecordBatch) else list(batch)
        return [self._apply(b, infer) for b in batches]

    def should_skip_batching(self) -> bool:
        return True  # elements are already RecordBatches of --batch-rows rows

    def get_num_bytes(self, batch) -> int:
        batches = [batch] if isinstance(batch, pa.RecordBatch) else batch
        return int(sum(b.nbytes for b in batches))

    def get_metrics_namespace(self) -> str:
        return NAMESPACE
