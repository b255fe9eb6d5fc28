"""Export a trained run (RUN_DIR/modifier.pt) into a Triton model repository.

Writes DIR/NAME/config.pbtxt and a new version folder DIR/NAME/<N>/ with model.py, a copy of
the weights, export.json and SHA256SUMS. The served model refuses to load weights whose sha256
differs from the recorded one. Example:

    mass export runs/mass_colour --repository triton_models --name mass_colour
"""

from __future__ import annotations

import argparse
import json

HELP = "export a trained run into a Triton model repository (checksummed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding modifier.pt")
    parser.add_argument(
        "--repository",
        required=True,
        metavar="DIR",
        help="Triton model repository (created if missing)",
    )
    parser.add_argument("--name", required=True, help="model name (folder under DIR)")
    parser.add_argument(
        "--version", type=int, default=None, help="version number (default: next free integer)"
    )
    parser.add_argument("--max-batch-size", type=int, default=8192)
    parser.add_argument("--instances", type=int, default=1, help="model instances (processes)")
    parser.add_argument(
        "--gpu-variant",
        action="store_true",
        help="also write configs/gpu.pbtxt (KIND_GPU) for an NGC Triton",
    )


def run(args: argparse.Namespace) -> int:
    from mass.export import export_modifier

    result = export_modifier(
        args.run_dir,
        args.repository,
        args.name,
        version=args.version,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        gpu_variant=args.gpu_variant,
    )
    print(
        json.dumps(
            {
                "name": result.name,
                "version": result.version,
                "path": str(result.version_dir),
                "sha256": result.sha256,
            }
        )
    )
    return 0
