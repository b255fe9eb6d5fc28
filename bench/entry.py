"""The ``main`` of every bench script that defines ``add_arguments(parser)`` and ``run(args)``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


def main(
    script: str,
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    # Both tools phone home by default; benchmarks run offline, like `mass` itself.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    parser = argparse.ArgumentParser(
        prog=f"bench/{Path(script).name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return int(run(parser.parse_args(argv)) or 0)
