"""Old import path of the Beam handlers, kept while branches written against it merge.

The code moved to :mod:`transforms.inference` (tensors, base, triton, triton_client, shm,
function). Nothing in this tree imports this module; delete it once no open branch does.
"""

from transforms.inference.function import FunctionModelHandler, TorchModifierFunction
from transforms.inference.shm import SHM_PREFIX, ShmSlot
from transforms.inference.tensors import (
    ImageInputs,
    ModifierInputs,
    Tensors,
    TextInputs,
    check_response,
)
from transforms.inference.triton import TritonModelHandler
from transforms.inference.triton_client import RETRYABLE, RequestPolicy, TritonClient

__all__ = [
    "RETRYABLE",
    "SHM_PREFIX",
    "FunctionModelHandler",
    "ImageInputs",
    "ModifierInputs",
    "RequestPolicy",
    "ShmSlot",
    "Tensors",
    "TextInputs",
    "TorchModifierFunction",
    "TritonClient",
    "TritonModelHandler",
    "check_response",
]
