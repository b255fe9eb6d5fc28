"""Extractor contract, NT-Xent, colour-preserving augmentations and in-process features."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mass.demo import coloured_mnist as cm
from mass.demo import extractor as ex
from mass.demo.augment import AugmentConfig, augment
from mass.demo.features import write_features
from mass.errors import ConfigError, InputError, UnreadableInputError


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    grey, digits = cm.load_mnist()
    return cm.colourize(grey[:64], np.arange(64) % 10)


@pytest.fixture(scope="module")
def model() -> ex.ImageEncoder:
    torch.manual_seed(0)
    return ex.ImageEncoder().eval()


def test_forward_maps_uint8_bytes_to_unit_norm_float32_128(model, images):
    out = model(torch.from_numpy(images[:5]))
    assert out.shape == (5, 128) and out.dtype == torch.float32
    assert torch.allclose(out.norm(dim=1), torch.ones(5), atol=1e-5)


def test_forward_rejects_float_images_with_a_message_naming_the_shape(model):
    with pytest.raises(InputError, match="uint8"):
        model(torch.zeros(2, 2352))


def test_save_load_round_trip_gives_identical_outputs(model, images, tmp_path):
    path = str(tmp_path / "extractor.pt")
    sha = ex.save_extractor(model, path, meta={"note": "test"})
    loaded = ex.load_extractor(path)
    assert not loaded.training and sha == ex.file_sha256(path)
    x = torch.from_numpy(images)
    assert torch.equal(loaded(x), model(x))


def test_load_rejects_a_file_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(UnreadableInputError, match="junk.pt"):
        ex.load_extractor(str(path))


def test_embed_images_matches_forward_whatever_the_batch_size(model, images):
    full = model(torch.from_numpy(images)).detach().numpy()
    for bs in (1, 7, 64):
        np.testing.assert_allclose(ex.embed_images(model, images, batch_size=bs), full, atol=1e-6)


def test_nt_xent_matches_the_closed_form_for_orthogonal_pairs():
    z = torch.eye(2)
    t = 0.5
    expected = -math.log(math.exp(1 / t) / (math.exp(1 / t) + 2.0))
    assert ex.nt_xent_loss(z, z.clone(), temperature=t).item() == pytest.approx(expected)


def test_nt_xent_is_lower_for_matching_views_than_for_shuffled_ones():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(32, 16, generator=g)
    matched = ex.nt_xent_loss(z, z + 0.01, temperature=0.2)
    shuffled = ex.nt_xent_loss(z, z[torch.randperm(32, generator=g)], temperature=0.2)
    assert matched < shuffled


def test_augmentations_keep_every_pixel_on_the_background_to_white_line(images):
    """Colour survives exactly: without noise, each pixel stays bg + t * (white - bg)."""
    x = ex.ImageEncoder.to_chw(torch.from_numpy(images))
    views = augment(x, generator=torch.Generator().manual_seed(1), config=AugmentConfig(noise_p=0))
    assert views.shape == x.shape and (views - x).abs().mean() > 0.01  # views do change
    bg = torch.from_numpy(cm.COLOURS[np.arange(64) % 10] / 255.0).float()[:, :, None]
    direction = 1.0 - bg
    pixels = views.flatten(2)
    t = ((pixels - bg) * direction).sum(1, keepdim=True) / (direction**2).sum(1, keepdim=True)
    residual = (pixels - bg - t * direction).abs().max()
    # 2e-3 = the inputs' own uint8 rounding (0.5 / 255) off the exact line.
    assert residual < 3e-3 and t.min() > -3e-3 and t.max() < 1 + 3e-3


def test_pixel_noise_leaves_each_images_mean_colour_in_place(images):
    x = ex.ImageEncoder.to_chw(torch.from_numpy(images))
    # Noise is drawn last, so the same seed gives the same geometry with and without it.
    noisy = augment(x, generator=torch.Generator().manual_seed(2), config=AugmentConfig(noise_p=1))
    clean = augment(x, generator=torch.Generator().manual_seed(2), config=AugmentConfig(noise_p=0))
    assert noisy.min() >= 0 and noisy.max() <= 1 and not torch.equal(noisy, clean)
    assert (noisy.mean(dim=(2, 3)) - clean.mean(dim=(2, 3))).abs().max() < 0.03


def test_augmentations_are_a_function_of_the_generator_seed(images):
    x = ex.ImageEncoder.to_chw(torch.from_numpy(images[:8]))
    a = augment(x, generator=torch.Generator().manual_seed(5))
    b = augment(x, generator=torch.Generator().manual_seed(5))
    c = augment(x, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_augment_config_rejects_a_bad_probability():
    with pytest.raises(ConfigError, match="blur_p"):
        AugmentConfig(blur_p=1.5)


def test_augmented_view_embeddings_are_two_distinct_unit_norm_views(model, images):
    a, b = ex.augmented_view_embeddings(model, images, seed=3, batch_size=20)
    assert a.shape == b.shape == (64, 128) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(a, b)
    a2, _ = ex.augmented_view_embeddings(model, images, seed=3, batch_size=20)
    np.testing.assert_array_equal(a, a2)


def test_training_is_deterministic_given_the_seed_and_returns_eval_mode(images):
    cfg = ex.TrainConfig(epochs=1, batch_size=16, seed=4)
    m1, hist = ex.train_extractor(images[:32], config=cfg)
    m2, _ = ex.train_extractor(images[:32], config=cfg)
    assert not m1.training and np.isfinite(hist["loss"]).all()
    for (k, v1), v2 in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(v1, v2), k


def test_train_config_rejects_zero_epochs():
    with pytest.raises(ConfigError, match="epochs"):
        ex.TrainConfig(epochs=0)


def _tiny_raw(tmp_path, n: int = 40) -> str:
    table = cm.make_tables(rho=0.1, seed=0)["val"].slice(0, n)
    path = str(tmp_path / "val.parquet")
    pq.write_table(table, path)
    return path


def test_write_features_follows_the_embedding_contract(model, tmp_path):
    raw = _tiny_raw(tmp_path)
    out = write_features(
        model, raw, str(tmp_path / "features" / "val.parquet"), meta={"extractor_sha256": "abc"}
    )
    table = pq.read_table(out)
    assert table.column_names == ["id", "emb", *cm.ATTRIBUTES]
    emb_type = table.schema.field("emb").type
    assert emb_type.list_size == 128 and emb_type.value_type == pa.float32()
    _, images, _ = cm.read_split(raw)
    emb = np.stack(table.column("emb").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(emb, ex.embed_images(model, images))
    meta = table.schema.metadata
    assert meta[b"mass.rho"] == b"0.1" and meta[b"mass.extractor_sha256"] == b"abc"


@pytest.mark.slow
def test_train_extractor_command_reads_colour_and_digit_linearly(tmp_path):
    """Real data, short training: the probe must already see colour and digit well."""
    from mass.cli import main

    raw = tmp_path / "raw"
    cm.write_splits(str(raw), rho=0.1, seed=0)
    args = [
        "train-extractor",
        "--data",  # two splits' images (the demo trains on all three): the probe fits on the first
        str(raw / "train.parquet"),
        str(raw / "val.parquet"),
        "--out",
        str(tmp_path / "m"),
        "--epochs",
        "3",
        "--probe-val",
        str(raw / "test.parquet"),
        "--features-out",
        str(tmp_path / "features"),
    ]
    assert main(args) == 0
    report = json.loads((tmp_path / "m" / "probe.json").read_text())
    assert report["probe_accuracy"]["colour"] > 0.95
    assert report["probe_accuracy"]["digit"] > 0.6
    feats = pq.read_table(tmp_path / "features" / "test.parquet")
    assert feats.num_rows == 1000
    assert feats.schema.metadata[b"mass.extractor_sha256"] == report["sha256"].encode()
