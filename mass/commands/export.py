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

from mass.errors import ConfigError

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
        choices=["modifier", "extractor", "ensemble", "minilm"],
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
    from mass.keys import SIGNING_KEY_ENV, resolve_key
    from mass.serving import export

    export.check_model_name(args.name)
    common = {"version": args.version, "instances": args.instances, "gpu_variant": args.gpu_variant}
    if args.kind != "ensemble":
        key = resolve_key(args.signing_key_file, SIGNING_KEY_ENV)
        common["key"] = export.signing_key(key, purpose="sign")
    if args.max_batch_size is not None:
        common["max_batch_size"] = args.max_batch_size
    if args.kind in ("modifier", "extractor") and args.run_dir is None:
        raise ConfigError(f"--kind {args.kind} needs RUN_DIR (the trained run or checkpoint)")
    if args.kind == "modifier":
        result = export.export_modifier(args.run_dir, args.repository, args.name, **common)
    elif args.kind == "extractor":
        result = export.export_extractor(args.run_dir, args.repository, args.name, **common)
    elif args.kind == "minilm":
        result = export.export_minilm(args.repository, args.name, **common)
    else:
        if args.modifier is None:
            raise ConfigError("--kind ensemble needs --modifier NAME (an exported modifier)")
        path = export.export_ensemble(
            args.repository, extractor=args.extractor, modifier=args.modifier, name=args.name
        )
        print(json.dumps({"name": args.name, "version": 1, "path": str(path)}))
        return 0
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
