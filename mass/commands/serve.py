"""Start the local Triton Inference Server on a model repository and wait until Ctrl-C/SIGTERM.

Binds HTTP, gRPC and metrics to 127.0.0.1 only; prints the URLs as one JSON line once every
model is loaded. The server runs on a private copy of the models it serves (--model, default
every signed export), each verified first (signed manifest; owner key from --signing-key-file or
MASS_SIGNING_KEY_FILE); a folder nobody signed is never loaded. The shared-memory and model-control APIs need a
random token: the line's ``access_file`` (0600) holds it; jobs of the same user that pass
``--triton-url`` use shared memory only with ``MASS_TRITON_ACCESS_FILE`` set to that file
(without it they send tensors over gRPC). Example:

    mass serve --repository triton_models --grpc-port 8001
"""

from __future__ import annotations

import argparse

HELP = "start the local Triton server on a model repository and wait"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repository",
        default="triton_models",
        metavar="DIR",
        help="Triton model repository (default: triton_models)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="NAME[:VERSION]",
        help="serve only this model (repeatable; default: the newest version of every signed "
        "export). Folders nobody signed are never loaded; a named one is refused",
    )
    parser.add_argument("--grpc-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--http-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--metrics-port", type=int, default=None, help="default: a free port")
    parser.add_argument(
        "--model-control",
        choices=["none", "explicit", "poll"],
        default="none",
        help="none: load every served model at start; explicit: clients load them (with the "
        "access token); poll is refused (it would load unverified files)",
    )
    parser.add_argument("--log", default=None, metavar="FILE", help="server log file")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the server and its models to be ready (default 300)",
    )
    parser.add_argument(
        "--signing-key-file",
        default=None,
        metavar="FILE",
        help="owner key the exports were signed with (default: $MASS_SIGNING_KEY_FILE)",
    )


def run(args: argparse.Namespace) -> int:
    from mass.serving.foreground import serve

    return serve(
        args.repository,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        log_path=args.log,
        startup_timeout=args.startup_timeout,
        model_control=args.model_control,
        signing_key_file=args.signing_key_file,
        models=args.model,
    )
