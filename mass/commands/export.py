"""Export a trained run (RUN_DIR/modifier.pt) into a Triton model repository.

Writes DIR/NAME/config.pbtxt and a new version folder DIR/NAME/<N>/ with model.py, a copy of
the weights, export.json, SHA256SUMS (every file of the version and the config) and its
signature SHA256SUMS.sig (HMAC under the owner key: --signing-key-file or MASS_SIGNING_KEY_FILE;
required). The job and the served model refuse a version whose signature, files or config
differ, or that holds a file the manifest does not list. ``--kind`` exports the other models
of the repository. NAME is letters, digits, '_' and '-'. Examples:

    mass export runs/mass_colour --repository triton_models --name mass_colour
    mass export runs/extractor --kind extractor --repository triton_models --name mnist_cnn
    mass export --kind ensemble --modifier mass_colour --repository triton_models --name raw
    mass export --kind minilm --repository triton_models --name minilm      # extra `text`
"""

from __future__ import annotations

import argparse
import json

from mass.serving.export import KINDS

HELP = "export a trained run into a Triton model repository (signed with the owner key)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        nargs="?",
        default=None,
        help="run directory holding modifier.pt (extractor.pt for --kind extractor)",
    )
    parser.add_argument(
        "--repository",
        required=True,
        metavar="DIR",
        help="Triton model repository (created if missing)",
    )
    parser.add_argument(
        "--name", required=True, help="model name (folder under DIR): letters, digits, '_', '-'"
    )
    parser.add_argument(
        "--signing-key-file",
        default=None,
        metavar="FILE",
        help="owner key that signs the export (default: $MASS_SIGNING_KEY_FILE; `mass keygen`)",
    )
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="modifier",
        help="what to export (default: modifier)",
    )
    parser.add_argument(
        "--version", type=int, default=None, help="version number (default: next free integer)"
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="default 8192 (modifier), 4096 (extractor), 256 (minilm)",
    )
    parser.add_argument("--instances", type=int, default=1, help="model instances (processes)")
    parser.add_argument(
        "--gpu-variant",
        action="store_true",
        help="also write configs/gpu.pbtxt (KIND_GPU) for an NGC Triton",
    )
    parser.add_argument("--extractor", default="mnist_cnn", help="--kind ensemble: first step")
    parser.add_argument("--modifier", default=None, help="--kind ensemble: second step")


def run(args: argparse.Namespace) -> int:
    from mass.serving.export import export_kind

    summary = export_kind(
        args.kind,
        args.repository,
        args.name,
        run_dir=args.run_dir,
        signing_key_file=args.signing_key_file,
        version=args.version,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        gpu_variant=args.gpu_variant,
        extractor=args.extractor,
        modifier=args.modifier,
    )
    print(json.dumps(summary))
    return 0
