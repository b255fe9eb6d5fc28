"""Object store and cluster: the anonymize job's wall time on local disk vs an S3-compatible
store (moto's server on 127.0.0.1), and on FnApiRunner vs a 2-worker dask.distributed cluster
(separate processes, no shared local disk), same input, same in-process stand-in model
(mass.testing.stand_ins.NumpyModifier: the job's own costs, not a model's). Every release is
checked byte-identical to the local FnApiRunner one. Prints one JSON document.

    python bench/objstore.py --rows 200000 --dim 128 --files 8 --out /tmp/objstore.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from beam_pipelines import anonymize  # noqa: E402
from mass import fs  # noqa: E402
from mass.formats import committed_parts
from mass.keys import NOISE_KEY_ENV, write_key  # noqa: E402
from mass.testing.services import dask_cluster, moto_s3
from mass.testing.stand_ins import NumpyModifier, write_embeddings
from transforms.inference.function import FunctionModelHandler  # noqa: E402


def _job(src: str, out: str, dim: int, shards: int, extra: list[str]) -> float:
    """Wall seconds of the second of two runs (the first warms imports, clients, workers)."""
    _once(src, out, dim, shards, extra)
    return _once(src, out, dim, shards, extra)


def _once(src: str, out: str, dim: int, shards: int, extra: list[str]) -> float:
    info = {"name": "np", "version": 1, "sha256": "bench", "method": "test",
            "suppress": ["digit"], "preserve": [], "config_hash": "h", "dim": dim}  # fmt: skip
    handler = FunctionModelHandler(NumpyModifier(), output_dim=dim,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    t0 = time.perf_counter()
    anonymize.run(["--input", src, "--output", out, "--model", "np", "--no-audit", "--shards",
                   str(shards), *extra], model_handler=handler, model_info=info)  # fmt: skip
    return time.perf_counter() - t0


def _parts(out: str) -> list[bytes]:
    files = committed_parts(out) if fs.is_remote(out) else sorted(
        glob.glob(os.path.join(out, "part-*.parquet")))  # fmt: skip
    return [fs.read_bytes(p) for p in files]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--files", type=int, default=8, help="input files (work items)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    results: dict = {"rows": args.rows, "dim": args.dim, "files": args.files,
                     "shards": args.shards, "cpus": os.cpu_count(), "runs": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mass-objstore-") as tmp:
        write_key(os.path.join(tmp, "owner.key"))  # the stand-in model's noise is keyed
        os.environ[NOISE_KEY_ENV] = os.path.join(tmp, "owner.key")
        local_in = os.path.join(tmp, "in")
        os.makedirs(local_in)
        per = args.rows // args.files
        for i in range(args.files):
            write_embeddings(os.path.join(local_in, f"p{i:03d}.parquet"), rows=per,
                             dim=args.dim, id_offset=i * per, seed=i, row_group=65536)  # fmt: skip
        ref = os.path.join(tmp, "local_fnapi")
        runs = results["runs"]
        runs["fnapi_local_disk"] = _job(local_in, ref, args.dim, args.shards, [])
        want = _parts(ref)
        with moto_s3(tmp, "bench") as _:
            for name in sorted(os.listdir(local_in)):
                with open(os.path.join(local_in, name), "rb") as f:
                    fs.write_bytes(f"s3://bench/in/{name}", f.read())
            runs["fnapi_s3"] = _job("s3://bench/in", "s3://bench/fnapi", args.dim,
                                    args.shards, [])  # fmt: skip
            assert _parts("s3://bench/fnapi") == want, "object-store release differs"
            with dask_cluster(os.path.join(tmp, "cluster"), 2) as address:
                dask = ["--runner=DaskRunner", f"--dask_client_address={address}"]
                runs["dask2_s3"] = _job("s3://bench/in", "s3://bench/dask", args.dim, args.shards,
                                        [*dask, "--temp_location=s3://bench/tmp"])  # fmt: skip
                assert _parts("s3://bench/dask") == want, "Dask release differs"
                runs["dask2_local_disk"] = _job(local_in, os.path.join(tmp, "dask"),
                                                args.dim, args.shards, dask)  # fmt: skip
                assert _parts(os.path.join(tmp, "dask")) == want
    results["rows_per_s"] = {k: round(args.rows / v, 1) for k, v in runs.items()}
    results["seconds"] = {k: round(v, 2) for k, v in runs.items()}
    del results["runs"]
    print(json.dumps(results, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
