"""`mass` command line: one subcommand per module in :mod:`mass.commands`.

Each command module defines ``HELP`` (one line, its only home), ``add_arguments(parser)``
and ``run(args) -> int``. ``mass X`` imports only X's module (the others are listed by name:
their help is never shown then), and a missing optional extra only breaks the command that
needs it (`mass --help` lists that command as unavailable, naming what is missing).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from mass.errors import MassError
from mass.flags import check_no_extra, option_strings, split_tail

COMMANDS = {
    "prepare": "mass.commands.prepare",
    "train-extractor": "mass.commands.train_extractor",
    "serve": "mass.commands.serve",
    "extract": "mass.commands.extract",
    "train": "mass.commands.train",
    "export": "mass.commands.export",
    "anonymize": "mass.commands.anonymize",
    "audit": "mass.commands.audit",
    "bench": "mass.commands.bench",
    "keygen": "mass.commands.keygen",
    "report": "mass.commands.report",
}


class _KnownImportNoise(logging.Filter):
    """Drops what Beam's Google Cloud IO modules log about their own optional clients while
    being imported (apitools, bigquery_storage absent): this product never uses GCP IO and the
    lines ask nothing of the user. Also Beam's note, six times per pipeline, that it reads our
    DoFns' postponed annotations ("RowGroupSpec", "pa.RecordBatch") as Any: bookkeeping at
    INFO. Errors, and everything else, pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        gcp_io = "apache_beam/io/gcp/" in record.pathname.replace("\\", "/")
        if gcp_io and record.levelno <= logging.WARNING:
            return False
        return not (
            record.name == "apache_beam.typehints.native_type_compatibility"
            and record.levelno <= logging.INFO
            and str(record.msg).startswith("Converting string literal type hint")
        )


_IMPORT_NOISE = _KnownImportNoise()


def _configure_logging(argv: list[str]) -> None:
    """Before any command module is imported: an import that logs would otherwise configure
    the root logger itself (Python's default format) and our format would never apply."""
    verbose = any(a in ("-v", "--verbose") for a in argv)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_IMPORT_NOISE)


def _process_defaults() -> None:
    """Environment defaults of a `mass` process, set before any command module (and so torch)
    is imported; a value the environment already has is kept."""
    # Both tools phone home by default; this product runs offline and in CI.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    # libgomp's idle threads (torch's intra-op pool) otherwise spin while they wait for work:
    # on a busy machine that doubled an ot_repair fit's CPU seconds, which calibration's
    # budget counts (docs/calibration.md, "The budget's clock"). Read when torch loads libgomp.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mass",
        description="MaSS-ETL: batch anonymization of embeddings (train, serve, anonymize, audit).",
        allow_abbrev=False,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = next((a for a in argv if a in COMMANDS), None)
    for name, modname in COMMANDS.items():
        if wanted is not None and name != wanted:
            sub.add_parser(name, add_help=False, allow_abbrev=False)
            continue
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if wanted == name:
                raise
            sub.add_parser(name, help=f"(unavailable: {e.name} is not installed)",
                           allow_abbrev=False)  # fmt: skip
            continue
        p = sub.add_parser(
            name,
            help=mod.HELP,
            description=getattr(mod, "__doc__", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,  # a prefix is a typo too (and Beam's --label would be --labels)
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def parse_command(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the command's flags, its Beam pipeline options) from ``argv``; an unknown flag raises
    :class:`mass.errors.UnknownFlagError` naming it (:mod:`mass.flags`), before any work."""
    parser = build_parser(argv)
    head, tail = split_tail(argv)
    args, extra = parser.parse_known_args(head)
    beam = getattr(args, "_beam_flags", None)
    command = subparser(parser, args.command)
    if beam is None:
        if tail:  # not a Beam job: `--` keeps its argparse meaning (positionals follow)
            args, extra = parser.parse_known_args(argv)
        check_no_extra(command, extra)
        return args, []
    return args, beam(extra, tail, option_strings(command))


def run_command(args: argparse.Namespace, beam_args: list[str]) -> int:
    if getattr(args, "_beam_flags", None) is None:
        return int(args._run(args) or 0)
    return int(args._run(args, beam_args) or 0)


def main(argv: list[str] | None = None) -> int:
    _process_defaults()
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging(argv)
    command = next((a for a in argv if a in COMMANDS), "")
    try:
        args, beam_args = parse_command(argv)
        return run_command(args, beam_args)
    except MassError as e:
        print(f"mass {command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C / SIGINT: the same unwinding as SIGTERM, no traceback
        print(f"mass {command}: interrupted (SIGINT, exit 130): stopped before finishing; "
              "nothing was published, and this run's private and staged files were removed",
              file=sys.stderr)  # fmt: skip
        return 130


if __name__ == "__main__":
    sys.exit(main())
