"""Shim for exports made before the move (see :mod:`mass.triton_adapters`): their signed
``model.py`` imports this path. The adapter is :mod:`mass.serving.adapters.extractor`."""

from mass.serving.adapters.extractor import TritonPythonModel  # noqa: F401
