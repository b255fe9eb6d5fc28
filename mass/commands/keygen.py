"""Write a new random owner key (256 bits, file mode 0600); never overwrites a file.

The key seeds every release-time noise stream (``mass anonymize --noise-key-file``) and signs
exports. Keep it outside every tracked output (git, DVC, the model repository, the release):
anyone who holds it can recompute the noise and subtract it. See docs/threat-model.md.
"""

from __future__ import annotations

import argparse

HELP = "write a new random owner key (mode 0600) for keyed noise and export signatures"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="key file to create (refused if it exists)")


def run(args: argparse.Namespace) -> int:
    from mass.keys import write_key

    key = write_key(args.path)
    print(f"keygen: wrote {args.path} (mode 0600), fingerprint {key.fingerprint}")
    return 0
