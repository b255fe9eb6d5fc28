"""Raw-domain reference rows of `bench/compare.py`: image edits, then the same CNN extractor.

Blur, down/up-sampling and centre masking of the coloured-MNIST images are heuristics on
images, not modifiers of embeddings: they cannot be exported or served by the pipeline.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mass.errors import ConfigError


def _gaussian_kernel(k: int, sigma: float) -> torch.Tensor:
    t = torch.arange(k, dtype=torch.float32) - (k - 1) / 2
    g = torch.exp(-(t**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, k, k).contiguous()


def image_op(images: np.ndarray, op: str, value: float, k: int = 0) -> np.ndarray:
    """uint8 [N, 2352] HWC -> blurred / down-up-sampled / centre-masked, same layout."""
    import torch.nn.functional as F

    x = torch.from_numpy(images).float().view(-1, 28, 28, 3).permute(0, 3, 1, 2) / 255.0
    if op == "blur":
        x = F.conv2d(F.pad(x, [k // 2] * 4, mode="replicate"), _gaussian_kernel(k, value), groups=3)
    elif op == "downsample":
        small = max(1, int(round(28 / value)))
        x = F.interpolate(
            F.interpolate(x, size=(small, small), mode="area"),
            size=(28, 28),
            mode="bilinear",
            align_corners=False,
        )
    elif op == "mask":  # the paper's obfuscation: blank a centred region of area ``value``
        side = int(round(28 * value**0.5))
        lo = (28 - side) // 2
        x = x.clone()
        x[:, :, lo : lo + side, lo : lo + side] = 0.0
    else:
        raise ConfigError(f"unknown image op {op!r}")
    out = (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1)
    return out.reshape(len(images), -1).numpy()


RAW_ROWS = [
    ("blur k=5 s=1.0 (raw)", "blur", 1.0, 5),
    ("blur k=9 s=3.0 (raw)", "blur", 3.0, 9),
    ("downsample 4x (raw)", "downsample", 4.0, 0),
    ("downsample 8x (raw)", "downsample", 8.0, 0),
    ("mask centre 0.36 (raw)", "mask", 0.36, 0),
    ("mask centre 0.64 (raw)", "mask", 0.64, 0),
]


def raw_baselines(images: dict[str, np.ndarray], extractor) -> dict[str, tuple]:
    from mass.demo.extractor import embed_images

    out = {}
    for label, op, value, k in RAW_ROWS:
        t0 = time.perf_counter()
        x_tr = embed_images(extractor, image_op(images["train"], op, value, k))
        x_te = embed_images(extractor, image_op(images["test"], op, value, k))
        out[label] = (x_tr, x_te, time.perf_counter() - t0)
    return out
