"""The image feature extractor: a small CNN trained without labels by SimCLR.

Contract (``docs/contracts.md``, "Extractor"): ``load_extractor(path)`` returns an ``nn.Module``
in eval mode whose ``forward(images: uint8[N, 2352]) -> float32[N, 128]`` is L2-normalised;
scaling to [0, 1] and HWC -> CHW happen inside, so Triton's adapter passes raw bytes through.
Training sees only the training split's images (no labels); colour-preserving augmentations
(:mod:`mass.demo.augment`) keep the background colour learnable as well as the digit shape.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass.demo.augment import AugmentConfig, augment
from mass.digest import sha256_file as file_sha256  # re-exported: train_extractor, tests
from mass.errors import ConfigError, InputError, UnreadableInputError
from mass.safe_load import plain

log = logging.getLogger(__name__)

KIND = "mnist_cnn"
# SimCLR epochs: ~94% digit / 100% colour linear probe at rho = 0.1.
DEFAULT_EPOCHS = 15
SIDE, CHANNELS = 28, 3
IMAGE_SIZE = SIDE * SIDE * CHANNELS


@dataclass(frozen=True)
class EncoderConfig:
    widths: tuple[int, int, int] = (16, 32, 64)
    pool: int = 3  # output side of the final adaptive average pool
    dim: int = 128


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class ImageEncoder(nn.Module):
    """Three conv blocks -> coarse ``pool x pool`` average pool -> linear -> ``dim`` features.

    The coarse pool keeps where strokes are (digit shape) while averaging over many pixels,
    most of them background, so the background colour reaches the features directly.
    """

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__()
        self.config = config or EncoderConfig()
        w1, w2, w3 = self.config.widths
        self.body = nn.Sequential(
            _block(CHANNELS, w1),
            nn.MaxPool2d(2),  # 14x14
            _block(w1, w2),
            nn.MaxPool2d(2),  # 7x7
            _block(w2, w3),
            nn.AdaptiveAvgPool2d(self.config.pool),
            nn.Flatten(),
        )
        self.head = nn.Linear(w3 * self.config.pool**2, self.config.dim)

    @staticmethod
    def to_chw(images: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, 2352]`` (RGB HWC bytes) -> float32 ``[N, 3, 28, 28]`` in [0, 1]."""
        return images.reshape(-1, SIDE, SIDE, CHANNELS).permute(0, 3, 1, 2).float() / 255.0

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Unnormalised features of float ``[N, 3, 28, 28]`` images (training path)."""
        return self.head(self.body(x))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.dim() != 2 or images.shape[1] != IMAGE_SIZE:
            raise InputError(
                f"extractor input has dtype {images.dtype} shape {tuple(images.shape)}; "
                f"expected uint8 [N, {IMAGE_SIZE}] (RGB HWC bytes)"
            )
        return F.normalize(self.features(self.to_chw(images)), dim=1)


def nt_xent_loss(z1: torch.Tensor, z2: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """NT-Xent of SimCLR as used by MaSS (eqs. 5-7, w = 1): :func:`mass.losses.nt_xent_loss`."""
    from mass.losses import nt_xent_loss as nt_xent

    return nt_xent(z1, z2, tau=temperature)


def projector(dim: int, out: int = 64) -> nn.Sequential:
    """SimCLR's MLP projection head (training only; never saved with the extractor)."""
    return nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU(), nn.Linear(dim, out))


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = DEFAULT_EPOCHS
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    temperature: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)}: must be >= 1")
        if self.temperature <= 0:
            raise ConfigError(f"temperature={self.temperature}: must be > 0")


def train_extractor(
    images: np.ndarray,
    *,
    config: TrainConfig | None = None,
    augment_config: AugmentConfig | None = None,
    encoder_config: EncoderConfig | None = None,
) -> tuple[ImageEncoder, dict]:
    """SimCLR on uint8 ``[N, 2352]`` images -> (encoder in eval mode, history dict)."""
    cfg = config or TrainConfig()
    images = _check_images(images, source="training images")
    if images.shape[0] < 2:
        raise InputError("training images: SimCLR needs at least 2 images (negatives)")
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    model = ImageEncoder(encoder_config)
    proj = projector(model.config.dim)
    params = list(model.parameters()) + list(proj.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = -(-images.shape[0] // cfg.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=cfg.lr, total_steps=cfg.epochs * steps_per_epoch, pct_start=0.1
    )
    data = torch.from_numpy(np.array(images, copy=True))
    history: dict = {"loss": [], "epoch_seconds": []}
    model.train()
    proj.train()
    for epoch in range(cfg.epochs):
        start, total = time.perf_counter(), 0.0
        order = torch.randperm(data.shape[0], generator=g)
        for i in range(steps_per_epoch):
            idx = order[i * cfg.batch_size : (i + 1) * cfg.batch_size]
            if idx.numel() < 2:
                continue
            x = ImageEncoder.to_chw(data[idx])
            views = torch.cat([augment(x, generator=g, config=augment_config) for _ in range(2)])
            z = proj(model.features(views))
            loss = nt_xent_loss(*z.chunk(2), temperature=cfg.temperature)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * idx.numel()
        history["loss"].append(total / data.shape[0])
        history["epoch_seconds"].append(time.perf_counter() - start)
        log.info(
            "epoch %d/%d loss %.4f (%.1fs)",
            epoch + 1,
            cfg.epochs,
            history["loss"][-1],
            history["epoch_seconds"][-1],
        )
    history["train_seconds"] = float(sum(history["epoch_seconds"]))
    history["config"] = asdict(cfg)
    return model.eval(), history


def _check_images(images: np.ndarray, *, source: str) -> np.ndarray:
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != IMAGE_SIZE:
        raise InputError(
            f"{source}: dtype {images.dtype} shape {images.shape}; expected uint8 [N, {IMAGE_SIZE}]"
        )
    return images


@torch.no_grad()
def embed_images(model: nn.Module, images: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
    """uint8 ``[N, 2352]`` -> float32 ``[N, 128]`` with the model's own (eval) ``forward``."""
    images = _check_images(images, source="embed_images")
    model.eval()
    # np.array copies each batch: Arrow-backed input is read-only, torch wants writable memory.
    out = [
        model(torch.from_numpy(np.array(images[i : i + batch_size]))).numpy()
        for i in range(0, images.shape[0], batch_size)
    ]
    dim = getattr(getattr(model, "config", None), "dim", 128)
    return np.concatenate(out) if out else np.zeros((0, dim), np.float32)


@torch.no_grad()
def augmented_view_embeddings(
    model: ImageEncoder,
    images: np.ndarray,
    *,
    seed: int = 0,
    batch_size: int = 512,
    config: AugmentConfig | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two raw-domain views per image through the frozen extractor: ``(F(aug(x)), F(aug(x)))``.

    This is how MaSS (appendix B) pretrains its attribute-agnostic model: the views are made in
    the raw data domain, then embedded. Both outputs are float32 ``[N, 128]``, L2-normalised,
    and a pure function of ``seed`` (call with different seeds for fresh pairs per epoch).
    """
    images = _check_images(images, source="augmented_view_embeddings")
    model.eval()
    g = torch.Generator().manual_seed(seed)
    a, b = [], []
    for i in range(0, images.shape[0], batch_size):
        x = ImageEncoder.to_chw(torch.from_numpy(np.array(images[i : i + batch_size])))
        a.append(F.normalize(model.features(augment(x, generator=g, config=config)), dim=1))
        b.append(F.normalize(model.features(augment(x, generator=g, config=config)), dim=1))
    return torch.cat(a).numpy(), torch.cat(b).numpy()


def save_extractor(model: ImageEncoder, path: str, *, meta: dict | None = None) -> str:
    """Write the checkpoint; returns the sha256 of the written file."""
    payload = {
        "kind": KIND,
        "config": asdict(model.config),
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "meta": plain(dict(meta or {}), where="extractor metadata"),
    }
    torch.save(payload, path)
    return file_sha256(path)


def load_extractor(path: str) -> ImageEncoder:
    """Rebuild the extractor saved by :func:`save_extractor`, in eval mode."""
    from mass.safe_load import load_checkpoint

    remedy = "write a fresh one with `mass train-extractor`"
    payload = load_checkpoint(path, what="extractor checkpoint", remedy=remedy)
    if not isinstance(payload, dict) or payload.get("kind") != KIND:
        raise UnreadableInputError(f"{path}: checkpoint kind is not {KIND!r}; wrong file?")
    cfg = payload["config"]
    model = ImageEncoder(
        EncoderConfig(widths=tuple(cfg["widths"]), pool=int(cfg["pool"]), dim=int(cfg["dim"]))
    )
    model.load_state_dict(payload["state_dict"])
    return model.eval()


def linear_probe(
    train_x: np.ndarray,
    train_y: dict[str, np.ndarray],
    test_x: np.ndarray,
    test_y: dict[str, np.ndarray],
    *,
    max_iter: int = 2000,
) -> dict[str, float]:
    """Test accuracy of a logistic regression per attribute, fitted on the training embeddings.

    The standard linear-evaluation protocol of SimCLR: how much of each attribute a linear
    attacker/consumer can read from the frozen features.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = {}
    for attr, y in train_y.items():
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter))
        clf.fit(train_x, y)
        out[attr] = float(clf.score(test_x, test_y[attr]))
    return out
