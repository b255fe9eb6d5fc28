"""The in-process backend: a Python function with the same named tensors as the served model
(tests, in-process runs), like Beam's local handlers (``pytorch_inference``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from apache_beam.ml.inference.base import ModelHandler

from mass.serving.contract import EMBEDDING, ROW_SEED
from mass.serving.tensors import ModifierInputs, Tensors
from transforms.inference.base import ArrowBatchInference


class FunctionModelHandler(ArrowBatchInference, ModelHandler):
    """Run ``load()`` once per worker, then ``fn(tensors) -> float32[n, d]`` per batch.

    ``load`` is a picklable zero-argument callable returning the inference function (e.g.
    :class:`TorchModifierFunction`), so heavy models are built on the worker, not pickled.
    The anonymize job rebinds the default :class:`ModifierInputs` to its keyed seeds
    (:meth:`with_row_seeds`), exactly as for Triton.
    """

    def __init__(
        self,
        load: Callable[[], Callable[[Tensors], np.ndarray]],
        *,
        model: str = "function",
        inputs: Callable[[pa.RecordBatch], Tensors] | None = None,
        output_col: str = "emb",
        output_dim: int | None = None,
        keep_input_as: str | None = None,
        input_col: str | None = None,
    ) -> None:
        ModelHandler.__init__(self)
        self._load = load
        self._init_arrow(
            model=model,
            inputs=inputs or ModifierInputs(),
            output_col=output_col,
            output_dim=output_dim,
            keep_input_as=keep_input_as,
            input_col=input_col,
        )

    def load_model(self):
        return self._load()

    def run_inference(self, batch, model, inference_args=None):
        return self._each(batch, model)


class TorchModifierFunction:
    """In-process modifier: ``load_modifier(path)`` applied to EMBEDDING with ROW_SEED."""

    def __init__(self, path: str, *, threads: int = 1) -> None:
        self.path, self.threads = path, threads

    def __call__(self):
        import torch

        from mass.modifiers import load_modifier

        torch.set_num_threads(self.threads)
        model = load_modifier(self.path)

        def infer(t: Tensors) -> np.ndarray:
            with torch.no_grad():
                seeds = torch.from_numpy(np.ascontiguousarray(t[ROW_SEED][:, 0]))
                return model(torch.from_numpy(np.array(t[EMBEDDING])), seeds=seeds).numpy()

        return infer
