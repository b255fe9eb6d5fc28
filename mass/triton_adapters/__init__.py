"""Compatibility shim: the old import path of the served adapters, kept for exports already made.

Every ``model.py`` that `mass export` wrote before the adapters moved to
:mod:`mass.serving.adapters` ends with ``from mass.triton_adapters.<kind> import
TritonPythonModel``, and that ``model.py`` is listed in the version's signed ``SHA256SUMS``:
editing it would break the signature, so those exports keep serving only while this path
imports. New exports import :mod:`mass.serving.adapters` directly; nothing else should import
this package (the manifest functions live in :mod:`mass.serving.manifest`, names in
:mod:`mass.serving.contract`). Remove it once no repository holds a pre-move export
(``grep -rl mass.triton_adapters triton_models/*/*/model.py`` finds them; re-export those).
"""
