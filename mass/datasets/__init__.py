"""Datasets MaSS-ETL can build itself (raw media + attribute labels as Parquet)."""

from mass.datasets.coloured_mnist import (
    ATTRIBUTES,
    COLOURS,
    IMAGE_SIZE,
    SPLITS,
    coloured_mnist_features,
    make_tables,
    read_split,
    write_splits,
)

__all__ = [
    "ATTRIBUTES",
    "COLOURS",
    "IMAGE_SIZE",
    "SPLITS",
    "coloured_mnist_features",
    "make_tables",
    "read_split",
    "write_splits",
]
