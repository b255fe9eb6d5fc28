"""Thin adapters that the generated Triton ``model.py`` files import (python backend).

``model.py`` is a bootstrap plus one import (:data:`mass.serving.repository.MODEL_PY`); the
adapter classes here do the work: :mod:`.modifier` (EMBEDDING + ROW_SEED -> PRIVATIZED),
:mod:`.extractor` (IMAGE -> EMBEDDING), :mod:`.minilm` (TEXT -> EMBEDDING), with the tensor
names of :mod:`mass.serving.contract`. They import ``triton_python_backend_utils`` and so load
only inside Triton; each verifies its version's signed manifest (:mod:`mass.serving.manifest`)
before loading any weights. This package module imports nothing.
"""
