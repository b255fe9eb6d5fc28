"""Train the SimCLR CNN feature extractor on a raw split's images (labels unused).

Writes OUT/extractor.pt (``mass.demo.extractor.load_extractor`` reads it) and OUT/probe.json
(training time, loss curve and, with --probe-val, linear-probe accuracy per attribute).
With --features-out DIR it also embeds the raw splits in process (same numbers as the
Triton-served model) into DIR/<split>.parquet; --checkpoint skips training and only embeds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

import torch

from mass.errors import ConfigError

HELP = "train the SimCLR CNN feature extractor on the training images"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mass.demo.extractor import TrainConfig

    d = TrainConfig()
    parser.add_argument(
        "--data",
        nargs="+",
        default=["data/raw/train.parquet"],
        metavar="PARQUET",
        help="raw split(s) whose images train the extractor (no labels read; the linear probe "
        "fits on the first)",
    )
    parser.add_argument("--out", default="models/extractor", help="output directory")
    parser.add_argument(
        "--epochs", type=int, default=d.epochs, help=f"SimCLR epochs (default {d.epochs})"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=d.batch_size,
        help=f"images per SimCLR batch (default {d.batch_size})",
    )
    parser.add_argument("--lr", type=float, default=d.lr, help=f"learning rate (default {d.lr})")
    parser.add_argument(
        "--temperature",
        type=float,
        default=d.temperature,
        help=f"NT-Xent temperature (default {d.temperature})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and augmentations")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument(
        "--probe-val",
        default=None,
        metavar="PARQUET",
        help="raw split to score the linear probe on (e.g. data/raw/test.parquet)",
    )
    parser.add_argument(
        "--features-out",
        default=None,
        metavar="DIR",
        help="also write embeddings of the raw splits to DIR/<split>.parquet",
    )
    parser.add_argument(
        "--splits",
        nargs="+",
        default=None,
        metavar="PARQUET",
        help="raw splits to embed with --features-out (default: train/val/test next to --data)",
    )
    parser.add_argument(
        "--checkpoint", default=None, help="embed with this extractor.pt instead of training one"
    )


def run(args: argparse.Namespace) -> int:
    from mass.demo.extractor import TrainConfig, file_sha256, load_extractor
    from mass.demo.features import train_and_save, write_features

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.checkpoint:
        if not args.features_out:
            raise ConfigError("--checkpoint only embeds; pass --features-out DIR as well")
        ckpt = args.checkpoint
    else:
        cfg = TrainConfig(
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            temperature=args.temperature,
            seed=args.seed,
        )
        report = train_and_save(list(args.data), args.out, config=cfg, probe_path=args.probe_val)
        ckpt = report["extractor"]
        print(
            json.dumps(
                {k: report[k] for k in ("train_seconds", "probe_accuracy") if k in report},
                sort_keys=True,
            )
        )
    if args.features_out:
        splits = args.splits or [
            p
            for p in (
                os.path.join(os.path.dirname(args.data[0]), f"{s}.parquet")
                for s in ("train", "val", "test")
            )
            if os.path.exists(p)
        ]
        model, sha = load_extractor(ckpt), file_sha256(ckpt)
        for raw in splits:
            out = os.path.join(args.features_out, os.path.basename(raw))
            write_features(model, raw, out, meta={"extractor_sha256": sha})
            log.info("wrote features %s", out)
    return 0
