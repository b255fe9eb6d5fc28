"""The span of attributes' Fisher discriminant directions: what the last resort keeps.

Pure linear algebra on the rows it is given (no fitting loop, no training state), shared by the
last-resort method (:mod:`mass.methods.leace_project`) and the audit's label-free reference
(:func:`mass.metrics.unnamed.last_resort_release`), which must not import training code.
"""

from __future__ import annotations

import numpy as np
import torch

from mass.errors import ConfigError


def discriminant_basis(x: torch.Tensor, labels: dict[str, np.ndarray], ridge: float):
    """Orthonormal basis (d x m, float64) of the span of every attribute's Fisher discriminant
    directions on ``x`` (k - 1 per attribute with k classes present), and the mean of ``x``."""
    x = x.double()
    d = x.shape[1]
    mu = x.mean(0)
    eye = torch.eye(d, dtype=torch.float64)
    dirs = []
    for name, y in labels.items():
        y = np.asarray(y)
        classes = np.unique(y)
        if len(classes) < 2:
            raise ConfigError(f"preserved attribute {name!r}: one class in the training rows; "
                              "nothing to keep")  # fmt: skip
        within = torch.zeros(d, d, dtype=torch.float64)
        between = torch.zeros(d, d, dtype=torch.float64)
        for c in classes:
            xc = x[torch.from_numpy(y == c)]
            dev = xc - xc.mean(0)
            within += dev.T @ dev
            m = (xc.mean(0) - mu)[:, None]
            between += len(xc) * (m @ m.T)
        within = within / len(x)
        between = between / len(x)
        within += ridge * float(torch.trace(within)) / d * eye  # shrinkage: never singular
        inv_l = torch.linalg.inv(torch.linalg.cholesky(within))
        _, vecs = torch.linalg.eigh(inv_l @ between @ inv_l.T)  # ascending eigenvalues
        dirs.append(inv_l.T @ vecs[:, -(len(classes) - 1) :])
    q, r = torch.linalg.qr(torch.cat(dirs, dim=1))
    keep = torch.abs(torch.diagonal(r)) > 1e-9 * max(float(torch.abs(r).max()), 1e-300)
    return q[:, keep], mu
