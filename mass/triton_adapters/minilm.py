"""Shim for exports made before the move (see :mod:`mass.triton_adapters`): their signed
``model.py`` imports this path. The adapter is :mod:`mass.serving.adapters.minilm`."""

from mass.serving.adapters.minilm import TritonPythonModel  # noqa: F401
