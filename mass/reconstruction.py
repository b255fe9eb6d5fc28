"""Reconstruction attack: how much of the original embedding can be recovered from a release.

The attack of "Bridging the gap between debiasing and privacy" (Fig. 2c), in embedding space:
an MLP decoder is trained on (release, original) pairs of one split and scored on another.
It works for any method's release, so the compare bench reports it for every row. Low error
means the release is (close to) invertible: the suppressed attribute may be gone from what a
classifier reads, yet still recoverable by whoever inverts the modifier.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mass.errors import InputError
from mass.modifiers import mlp


@dataclass(frozen=True)
class ReconstructionResult:
    mse: float  # mean over rows of the squared L2 error ||x_hat - x||^2
    cosine: float  # mean cosine similarity between x_hat and x
    identity_mse: float  # the same error when the release itself is taken as the guess
    identity_cosine: float

    def to_dict(self) -> dict:
        return asdict(self)


def reconstruction_errors(x_hat: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(mean squared L2 error, mean cosine similarity) between guesses and originals."""
    a = torch.as_tensor(np.asarray(x_hat, dtype=np.float32))
    b = torch.as_tensor(np.asarray(x, dtype=np.float32))
    mse = float((a - b).pow(2).sum(dim=1).mean())
    cos = float(F.cosine_similarity(a, b, dim=1, eps=1e-8).mean())
    return mse, cos


def reconstruction_attack(
    release_train: np.ndarray,
    original_train: np.ndarray,
    release_test: np.ndarray,
    original_test: np.ndarray,
    *,
    hidden: tuple[int, ...] = (256, 256),
    epochs: int = 60,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> ReconstructionResult:
    """Train ``decoder(release) ~ original`` on the train pair, score it on the test pair."""
    for name, a, b in (
        ("train", release_train, original_train),
        ("test", release_test, original_test),
    ):
        if len(a) != len(b) or np.asarray(a).shape[1:] != np.asarray(b).shape[1:]:
            raise InputError(
                f"reconstruction_attack: {name} release {np.shape(a)} and original {np.shape(b)} "
                "must pair row by row"
            )
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    xr = torch.as_tensor(np.asarray(release_train, dtype=np.float32))
    xo = torch.as_tensor(np.asarray(original_train, dtype=np.float32))
    dec = mlp([xr.shape[1], *hidden, xo.shape[1]])
    opt = torch.optim.Adam(dec.parameters(), lr=lr)
    for _ in range(epochs):
        perm = torch.randperm(len(xr), generator=gen)
        for i in range(0, len(xr), batch_size):
            idx = perm[i : i + batch_size]
            loss = (dec(xr[idx]) - xo[idx]).pow(2).sum(dim=1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        guess = dec(torch.as_tensor(np.asarray(release_test, dtype=np.float32))).numpy()
    mse, cos = reconstruction_errors(guess, original_test)
    id_mse, id_cos = reconstruction_errors(release_test, original_test)
    return ReconstructionResult(mse=mse, cosine=cos, identity_mse=id_mse, identity_cosine=id_cos)
