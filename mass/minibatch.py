"""Shuffled minibatches of row indices: the one permutation every small trainer here draws
(the branch judges of :mod:`mass.branches`, the methods' classifiers and adversaries)."""

from __future__ import annotations

import torch


def batches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    """A fresh permutation of ``n`` rows (one ``randperm`` draw from ``gen``) cut into
    batches of ``batch_size``; a batch of one row is dropped (BatchNorm needs two in training
    mode), unless no batch is left (then the whole permutation is the one batch)."""
    perm = torch.randperm(n, generator=gen)
    out = [perm[i : i + batch_size] for i in range(0, n, batch_size)]
    return [b for b in out if len(b) >= 2] or [perm]
