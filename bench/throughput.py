"""`python bench/throughput.py ARGS` = `mass bench throughput ARGS` (mass/bench/throughput.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

from mass.bench.throughput import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
