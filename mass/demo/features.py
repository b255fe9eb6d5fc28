"""Coloured MNIST-5k features: raw splits -> SimCLR extractor -> embedding Parquet, in process.

Where the demo's dataset (:mod:`mass.demo.coloured_mnist`) meets its extractor
(:mod:`mass.demo.extractor`): neither of those imports the other, this module imports both.
``mass train-extractor`` runs :func:`train_and_save`; benchmarks and tests use
:func:`coloured_mnist_features` (the whole DVC front half, cached).
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from torch import nn

from mass.demo.coloured_mnist import ATTRIBUTES, SPLITS, read_split, split_params, write_splits
from mass.demo.extractor import (
    DEFAULT_EPOCHS,
    TrainConfig,
    embed_images,
    linear_probe,
    load_extractor,
    save_extractor,
    train_extractor,
)
from mass.embeddings import embedding_array

log = logging.getLogger(__name__)


def write_features(
    model: nn.Module,
    raw_path: str,
    out_path: str,
    *,
    batch_size: int = 1024,
    meta: dict[str, str] | None = None,
) -> str:
    """Embed a raw split in-process -> ``id, emb fixed_size_list<float32>[128], labels`` Parquet.

    Same numbers as the served extractor (same module, same ``forward``); the raw file's
    ``mass.*`` schema metadata is carried over and ``meta`` is added to it.
    """
    ids, images, labels = read_split(raw_path)
    emb = embed_images(model, images, batch_size=batch_size)
    raw_meta = pq.read_schema(raw_path).metadata or {}
    md = {k: v for k, v in raw_meta.items() if k.startswith(b"mass.")}
    md.update({f"mass.{k}".encode(): str(v).encode() for k, v in (meta or {}).items()})
    table = pa.table(
        {"id": pa.array(ids), "emb": embedding_array(emb), **{a: labels[a] for a in ATTRIBUTES}}
    ).replace_schema_metadata(md)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, out_path)
    return out_path


def train_and_save(
    train_path: str | list[str],
    out_dir: str,
    *,
    config: TrainConfig | None = None,
    probe_path: str | None = None,
) -> dict:
    """Train on raw splits' images (one path or several: no labels are read for training),
    write ``OUT_DIR/extractor.pt`` and ``OUT_DIR/probe.json``.

    The probe JSON holds the training time and loss curve and, when ``probe_path`` is given,
    the linear-probe accuracy per attribute (fit on the first path's rows and labels, scored
    on ``probe_path``). Returns that JSON's content plus the checkpoint path.
    """
    cfg = config or TrainConfig()
    paths = [train_path] if isinstance(train_path, str) else list(train_path)
    splits = [read_split(p) for p in paths]
    _, images, labels = splits[0]
    seen = np.concatenate([s[1] for s in splits]) if len(splits) > 1 else images
    model, history = train_extractor(seen, config=cfg)
    os.makedirs(out_dir, exist_ok=True)
    ckpt = os.path.join(out_dir, "extractor.pt")
    meta = {"train_data": paths[0] if len(paths) == 1 else ",".join(paths)}
    sha = save_extractor(model, ckpt, meta={**meta, **split_params(paths[0])})
    report = {
        "extractor": ckpt,
        "sha256": sha,
        "train_seconds": round(history["train_seconds"], 2),
        "epochs": cfg.epochs,
        "loss": [round(v, 4) for v in history["loss"]],
        "config": history["config"],
    }
    if probe_path:
        _, test_images, test_labels = read_split(probe_path)
        report["probe_split"] = probe_path
        report["probe_accuracy"] = linear_probe(
            embed_images(model, images), labels, embed_images(model, test_images), test_labels
        )
        log.info("linear probe on %s: %s", probe_path, report["probe_accuracy"])
    with open(os.path.join(out_dir, "probe.json"), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    return report


def coloured_mnist_features(
    root: str = "data",
    *,
    rho: float = 0.1,
    seed: int = 0,
    epochs: int = DEFAULT_EPOCHS,
    force: bool = False,
) -> dict[str, str]:
    """Coloured MNIST-5k embeddings, built once and cached under ``root``.

    Runs, in process, what the DVC pipeline does with Triton/Beam (same numbers):
    ``mass prepare`` -> ``ROOT/raw/{train,val,test}.parquet``; SimCLR extractor training on the
    train split -> ``ROOT/extractor/{extractor.pt,probe.json}`` (probe scored on test); then
    ``ROOT/features/{train,val,test}.parquet`` with columns ``id``, ``emb``
    (fixed_size_list<float32>[128], L2-normalised) and ``digit, colour, parity, ge5, circle``
    (int64), ready for :func:`mass.io.load_embeddings`.

    Cached: when all three feature files exist and their schema metadata
    ``mass.features_params`` matches ``(rho, seed, epochs)``, nothing is recomputed (a call
    takes milliseconds). ``force=True`` rebuilds everything. The default
    :data:`DEFAULT_EPOCHS` (15) trains about 2-4 minutes on 2 idle CPU cores (much longer on a
    loaded machine); tests pass 1-3 epochs to stay quick.
    Returns ``{"train", "val", "test", "extractor", "probe"}`` -> paths.
    """
    key = json.dumps({"rho": float(rho), "seed": int(seed), "epochs": int(epochs)}, sort_keys=True)
    raw = {s: os.path.join(root, "raw", f"{s}.parquet") for s in SPLITS}
    feats = {s: os.path.join(root, "features", f"{s}.parquet") for s in SPLITS}
    model_dir = os.path.join(root, "extractor")
    out = {
        **feats,
        "extractor": os.path.join(model_dir, "extractor.pt"),
        "probe": os.path.join(model_dir, "probe.json"),
    }
    cached = all(_features_key(p) == key for p in feats.values())
    if cached and not force and os.path.exists(out["extractor"]):
        return out
    if force or any(
        not os.path.exists(p) or split_params(p) != {"rho": float(rho), "seed": int(seed)}
        for p in raw.values()
    ):
        write_splits(os.path.join(root, "raw"), rho=rho, seed=seed)
    report = train_and_save(
        raw["train"],
        model_dir,
        config=TrainConfig(epochs=epochs, seed=seed),
        probe_path=raw["test"],
    )
    model = load_extractor(report["extractor"])  # embed with exactly what was saved
    for s in SPLITS:
        write_features(
            model,
            raw[s],
            feats[s],
            meta={"features_params": key, "extractor_sha256": report["sha256"]},
        )
    return out


def _features_key(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return None  # unreadable cache entry: rebuild it
    value = meta.get(b"mass.features_params")
    return value.decode() if value is not None else None
