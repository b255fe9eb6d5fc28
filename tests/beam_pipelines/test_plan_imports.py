"""What planning a job loads. A ``--no-audit`` job (a worker-side or pre-audited run, and
`mass bench throughput`'s job) has no use for the audit's modules: Great Expectations and the
attackers cost seconds of import per job (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

_PLAN = """
import json, sys, argparse
from beam_pipelines import anonymize
from beam_pipelines.options import parse_job_argv
from beam_pipelines.plan import plan_anonymize
p = argparse.ArgumentParser()
anonymize.add_arguments(p)
args, beam = parse_job_argv(p, json.loads(sys.argv[1]))
job = plan_anonymize(args, beam)
print(json.dumps({"policy": job.policy is not None,
                  "gx": "great_expectations" in sys.modules,
                  "audit": "mass.audit" in sys.modules}))
"""


def _plan(tmp_path, *flags: str) -> dict:
    src = tmp_path / "in.parquet"
    emb = pa.array(list(np.zeros((8, 4), dtype=np.float32)), type=pa.list_(pa.float32(), 4))
    pq.write_table(pa.table({"id": pa.array(range(8)), "embedding": emb}), src)
    (tmp_path / "repo" / "m").mkdir(parents=True)
    argv = ["--input", str(src), "--output", str(tmp_path / "out"), "--model", "m",
            "--repository", str(tmp_path / "repo"), *flags]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _PLAN, json.dumps(argv)], capture_output=True,
                          text=True, check=True, cwd=tmp_path)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_job_without_the_audit_does_not_load_great_expectations(tmp_path):
    assert _plan(tmp_path, "--no-audit") == {"policy": False, "gx": False, "audit": False}


@pytest.mark.slow
def test_an_audited_job_loads_its_policy_at_plan_time(tmp_path):
    assert _plan(tmp_path) == {"policy": True, "gx": True, "audit": True}
