"""SimCLR-style augmentations for small RGB images, in plain torch (no torchvision here).

Deliberately *no* colour jitter and no grayscale: the background colour is an attribute the
extractor must keep (MaSS suppresses or preserves it downstream), so every transform here is
geometric or a local blur/noise/erasure that leaves the image's mean colour in place.
All randomness comes from an explicit ``torch.Generator`` so a seed reproduces the views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mass.errors import ConfigError


@dataclass(frozen=True)
class AugmentConfig:
    """Strengths of each transform; probabilities are per image."""

    crop_scale: tuple[float, float] = (0.5, 1.0)  # area fraction kept by the random resized crop
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    max_rotation_deg: float = 15.0
    max_shear: float = 0.15
    blur_p: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 1.0)
    noise_p: float = 0.5
    noise_std: float = 0.05
    erase_p: float = 0.3
    erase_scale: tuple[float, float] = (0.02, 0.12)

    def __post_init__(self) -> None:
        lo, hi = self.crop_scale
        if not 0.0 < lo <= hi <= 1.0:
            raise ConfigError(f"crop_scale={self.crop_scale}: need 0 < low <= high <= 1")
        for name in ("blur_p", "noise_p", "erase_p"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"{name}={p}: a probability must lie in [0, 1]")


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g)


def random_affine(x: torch.Tensor, cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Random resized crop + rotation + shear as one affine warp (one resampling, less blur).

    ``padding_mode="border"`` repeats the edge pixels, which are background, so warping never
    pulls in black that would shift the image's colour.
    """
    n = x.shape[0]
    area = _uniform(n, *cfg.crop_scale, g)
    log_r = _uniform(n, math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1]), g)
    ratio = torch.exp(log_r)
    sx = torch.sqrt(area * ratio).clamp(max=1.0)  # crop width / image width
    sy = torch.sqrt(area / ratio).clamp(max=1.0)
    # Crop centre anywhere that keeps the crop inside the image (normalised coords in [-1, 1]).
    tx = (1 - sx) * (2 * torch.rand(n, generator=g) - 1)
    ty = (1 - sy) * (2 * torch.rand(n, generator=g) - 1)
    theta = torch.deg2rad(_uniform(n, -cfg.max_rotation_deg, cfg.max_rotation_deg, g))
    shear = _uniform(n, -cfg.max_shear, cfg.max_shear, g)
    cos, sin = torch.cos(theta), torch.sin(theta)
    mat = torch.zeros(n, 2, 3)
    mat[:, 0, 0] = sx * cos
    mat[:, 0, 1] = sx * (-sin + shear)
    mat[:, 1, 0] = sy * sin
    mat[:, 1, 1] = sy * cos
    mat[:, 0, 2] = tx
    mat[:, 1, 2] = ty
    grid = F.affine_grid(mat.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_blur(x: torch.Tensor, cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Gaussian blur with a per-image sigma (5-tap separable, grouped conv over all images)."""
    n, c, h, w = x.shape
    apply = torch.rand(n, generator=g) < cfg.blur_p
    sigma = _uniform(n, *cfg.blur_sigma, g)
    taps = torch.arange(-2, 3, dtype=x.dtype)
    k = torch.exp(-(taps[None, :] ** 2) / (2 * sigma[:, None] ** 2))
    k = k / k.sum(dim=1, keepdim=True)
    identity = torch.zeros(5, dtype=x.dtype)
    identity[2] = 1.0
    k = torch.where(apply[:, None], k, identity)  # unblurred images get the identity kernel
    k = k.repeat_interleave(c, dim=0)  # one kernel per (image, channel) group
    flat = x.reshape(1, n * c, h, w)
    flat = F.conv2d(F.pad(flat, (2, 2, 0, 0), mode="replicate"), k[:, None, None, :], groups=n * c)
    flat = F.conv2d(F.pad(flat, (0, 0, 2, 2), mode="replicate"), k[:, None, :, None], groups=n * c)
    return flat.reshape(n, c, h, w)


def random_noise(x: torch.Tensor, cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Additive zero-mean Gaussian pixel noise (zero mean keeps the mean colour)."""
    apply = (torch.rand(x.shape[0], generator=g) < cfg.noise_p).to(x.dtype)
    noise = torch.randn(x.shape, generator=g, dtype=x.dtype) * cfg.noise_std
    return (x + noise * apply[:, None, None, None]).clamp(0.0, 1.0)


def random_erase(x: torch.Tensor, cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Fill a random rectangle with the image's own mean colour, hiding part of the strokes.

    Filling with the mean (not random values) keeps the colour statistics of the image.
    """
    n, _, h, w = x.shape
    apply = torch.rand(n, generator=g) < cfg.erase_p
    area = _uniform(n, *cfg.erase_scale, g) * h * w
    aspect = torch.exp(_uniform(n, math.log(0.5), math.log(2.0), g))
    eh = torch.sqrt(area * aspect).clamp(1, h - 1).floor()
    ew = torch.sqrt(area / aspect).clamp(1, w - 1).floor()
    top = (torch.rand(n, generator=g) * (h - eh + 1)).floor()
    left = (torch.rand(n, generator=g) * (w - ew + 1)).floor()
    rows = torch.arange(h, dtype=x.dtype)[None, :, None]
    cols = torch.arange(w, dtype=x.dtype)[None, None, :]
    inside = (
        (rows >= top[:, None, None])
        & (rows < (top + eh)[:, None, None])
        & (cols >= left[:, None, None])
        & (cols < (left + ew)[:, None, None])
        & apply[:, None, None]
    )
    mean = x.mean(dim=(2, 3), keepdim=True).expand_as(x)
    return torch.where(inside[:, None], mean, x)


def augment(
    x: torch.Tensor, *, generator: torch.Generator, config: AugmentConfig | None = None
) -> torch.Tensor:
    """One random view of each image: float ``[N, 3, H, W]`` in [0, 1] -> same shape."""
    cfg = config or AugmentConfig()
    x = random_affine(x, cfg, generator)
    x = random_blur(x, cfg, generator)
    x = random_erase(x, cfg, generator)
    return random_noise(x, cfg, generator)
