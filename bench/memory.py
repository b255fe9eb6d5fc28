"""Peak RSS of ``mass audit``, ``mass train`` and ``mass anonymize`` at several input sizes.

    nice -n 10 python bench/memory.py --rows 1000000,10000000 --dim 128 --work /tmp/mem_d \\
        --commands audit,train,anonymize --out memory.json

Each command runs as its own process, on data generated chunk by chunk
(``bench/gen_release.py``: a release + held-out labels; the anonymize input is
``tests/failclosed/million_rows.py``'s); its peak RSS is the kernel's ``ru_maxrss`` of that
process (``os.wait4``), and the whole process tree is sampled every 0.2 s as well.

``audit`` runs the real CLI (``mass.cli.main(["audit", ...])``) in a child that also reports,
after each id-hash partition of the streaming pass (:mod:`mass.audit.scan`), the process's
current and peak RSS and Arrow's allocated bytes, so a flat audit shows the same numbers from
the 5th to the 50th partition. ``anonymize`` is ``million_rows.py`` (the FnApiRunner job
against a real ``tritonserver``, its own process; the server's RSS reported apart).
Generated data is deleted at the end unless ``--keep``. Prints one JSON line per run and a
markdown table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import entry  # noqa: E402
from bench.measure import TreeRss  # noqa: E402

MiB = 2**20


def run_measured(cmd: list[str], *, log_path: str) -> dict:
    """Run ``cmd`` as a child: its ``ru_maxrss`` (``os.wait4``: the largest of it and the
    children it reaped), the sampled peak of the whole tree (this process included), wall."""
    t0 = time.monotonic()
    with open(log_path, "w") as log, TreeRss(interval=0.2) as tree:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "wall_s": round(time.monotonic() - t0, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "tree_peak_mib": round(tree.peak_tree / MiB, 1),
            "cpu_s_by_process": tree.cpu_by_process, "cmd": cmd, "log": log_path}  # fmt: skip


def _partition_lines(log_path: str) -> list[dict]:
    out = []
    with open(log_path) as f:
        for line in f:
            if line.startswith("MEMPART "):
                out.append(json.loads(line[len("MEMPART ") :]))
    return out


def child_audit(argv: list[str]) -> int:
    """``mass audit`` in this process, with one ``MEMPART {json}`` line per partition."""
    import psutil
    import pyarrow as pa

    import mass.audit.runner as runner
    from mass.cli import main

    real_scan = runner.scan

    def own(i: int | str, n: int) -> None:
        rss = psutil.Process().memory_info().rss
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print("MEMPART " + json.dumps({
            "partition": i, "n_parts": n, "rss_mib": round(rss / MiB, 1),
            "peak_mib": round(peak / MiB, 1),
            "arrow_mib": round(pa.total_allocated_bytes() / MiB, 1),
        }), flush=True)  # fmt: skip

    def scan(req, rows_sink, **kw):
        def sink(i, n_parts, frame):
            rows_sink(i, n_parts, frame)
            own(i, n_parts)

        s = real_scan(req, sink, **kw)
        own("scan-done", s.n_parts)
        return s

    runner.scan = scan
    rc = main(["audit", *argv])
    own("end", -1)
    return rc


# written into every data directory this script creates: only such a directory is ever
# replaced or deleted (a --work that already holds a d<rows> of someone else's is refused)
MARKER = ".mass-bench-memory"


def _ours(d: str) -> bool:
    return os.path.isfile(os.path.join(d, MARKER))


def generate(work: str, rows: int, dim: int) -> str:
    d = os.path.join(work, f"d{rows}")
    if os.path.exists(d) and not _ours(d):
        raise SystemExit(f"bench/memory.py: {d} exists and was not written by this script "
                         f"(no {MARKER}); choose another --work")  # fmt: skip
    if not os.path.exists(os.path.join(d, "labels.parquet")):
        shutil.rmtree(d, ignore_errors=True)  # ours (marker checked above): a partial run
        os.makedirs(d)
        open(os.path.join(d, MARKER), "w").close()
        subprocess.run([sys.executable, os.path.join(HERE, "gen_release.py"), "--rows",
                        str(rows), "--dim", str(dim), "--out", d], check=True, cwd=ROOT)  # fmt: skip
    return d


def _owner_key(work: str) -> None:
    """The export is signed and the noise keyed: a bench owner key unless one is set."""
    from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV, write_key

    if os.environ.get(NOISE_KEY_ENV) and os.environ.get(SIGNING_KEY_ENV):
        return
    path = os.path.join(work, "bench-owner.key")
    if not os.path.exists(path):
        write_key(path)
    os.environ.setdefault(NOISE_KEY_ENV, path)
    os.environ.setdefault(SIGNING_KEY_ENV, path)


def measure_one(command: str, d: str, rows: int, dim: int, args) -> dict:
    py = sys.executable
    log = os.path.join(os.path.dirname(d), f"{command}-{rows}.log")  # kept after the data
    if command == "audit":
        shutil.rmtree(os.path.join(d, "report"), ignore_errors=True)
        cmd = [py, os.path.join(HERE, "memory.py"), "--child-audit", "--release",
               os.path.join(d, "rel"), "--labels", os.path.join(d, "labels.parquet"),
               "--suppress", "digit", "--preserve", "colour", "--report",
               os.path.join(d, "report"), "--no-chart"]  # fmt: skip
    elif command == "train":
        shutil.rmtree(os.path.join(d, "run"), ignore_errors=True)
        cmd = [py, "-m", "mass.cli", "train", "--data", os.path.join(d, "labels.parquet"),
               "--suppress", "digit", "--preserve", "colour", "--method", args.train_method,
               "--out", os.path.join(d, "run"), "--no-progress"]  # fmt: skip
    elif command == "anonymize":
        work = os.path.join(d, "anon")
        _owner_key(os.path.dirname(d))
        shutil.rmtree(os.path.join(work, "release"), ignore_errors=True)
        shutil.rmtree(os.path.join(work, "release_quarantine"), ignore_errors=True)
        cmd = [py, os.path.join(ROOT, "tests", "failclosed", "million_rows.py"), "--rows",
               str(rows), "--dim", str(dim), "--work", work]  # fmt: skip
    else:
        raise SystemExit(f"unknown command {command!r} (audit, train, anonymize)")
    res = run_measured(cmd, log_path=log)
    res.update(command=command, rows=rows, dim=dim, load_avg=os.getloadavg())
    if command == "audit":
        parts = _partition_lines(log)
        res["partitions"] = parts
        per = [p for p in parts if isinstance(p["partition"], int)]
        if per:
            res["n_parts"] = per[0]["n_parts"]
            res["rss_after_partition_mib"] = {"first": per[0]["rss_mib"],
                                              "last": per[-1]["rss_mib"],
                                              "max": max(p["rss_mib"] for p in per)}  # fmt: skip
            res["peak_after_scan_mib"] = next(
                (p["peak_mib"] for p in parts if p["partition"] == "scan-done"), None
            )
    if command == "anonymize":
        with open(log) as f:
            lines = [ln for ln in f if ln.startswith("{")]
        if lines:  # million_rows.py's own summary: the job child and the server
            m = res["million_rows"] = json.loads(lines[-1])
            # the wrapper's own peak is million_rows.py reading the released ids back to
            # compare them: the job's is the number (max over its reaped children: the job,
            # then tritonserver, whose own sampled peak is reported beside it)
            res["wrapper_peak_rss_mib"] = res["peak_rss_mib"]
            res["peak_rss_mib"] = m["job_peak_rss_mib_ru_maxrss"]
    if res["rc"] != 0:
        with open(log) as f:
            res["log_tail"] = f.read()[-2000:]
    return res


def table(results: list[dict]) -> str:
    out = ["| command | rows x dim | peak RSS (own process) | tree peak (sampled) | wall | notes |",
           "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in results:
        note = f"rc {r['rc']}; load {r['load_avg'][0]:.1f}"
        if r["command"] == "audit" and "n_parts" in r:
            a = r["rss_after_partition_mib"]
            note += (f"; {r['n_parts']} partitions, RSS after each {a['first']:.0f}-"
                     f"{a['max']:.0f} MiB (last {a['last']:.0f}), peak by end of scan "
                     f"{r['peak_after_scan_mib']:.0f} MiB")  # fmt: skip
        if r["command"] == "anonymize" and "million_rows" in r:
            m = r["million_rows"]
            note += (f"; job process (peak RSS column), server "
                     f"{m['server_peak_rss_mib_sampled']:.0f} MiB, {m['rows_per_s']:.0f} rows/s, "
                     f"ids equal {m['ids_equal_input']}")  # fmt: skip
        mins, secs = divmod(int(r["wall_s"]), 60)
        out.append(f"| {r['command']} | {r['rows']:,} x {r['dim']} | "
                   f"{r['peak_rss_mib'] / 1024:.2f} GiB | {r['tree_peak_mib'] / 1024:.2f} GiB | "
                   f"{mins}:{secs:02d} | {note} |")  # fmt: skip
    return "\n".join(out)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--work", help="data directory (generated, then deleted)")
    ap.add_argument("--commands", default="audit,train,anonymize")
    ap.add_argument("--train-method", default="leace")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--out", help="write every result as JSON here")
    ap.add_argument(
        "--table", nargs="+", metavar="JSON", help="only print the table of earlier --out files"
    )


def run(a: argparse.Namespace) -> int:
    if a.table:
        results = []
        for path in a.table:
            with open(path) as f:
                results += json.load(f)
        print(table(results))
        return 0
    if not a.work:
        raise SystemExit("bench/memory.py: --work is required")
    results = []
    for rows in [int(r) for r in a.rows.split(",")]:
        d = generate(a.work, rows, a.dim)
        for command in a.commands.split(","):
            res = measure_one(command, d, rows, a.dim, a)
            print(json.dumps({k: v for k, v in res.items() if k != "partitions"}), flush=True)
            results.append(res)
            if a.out:
                with open(a.out, "w") as f:
                    json.dump(results, f, indent=1)
        if not a.keep and _ours(d):
            shutil.rmtree(d, ignore_errors=True)
    print(table(results))
    return 0 if all(r["rc"] == 0 for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-audit"]:  # the measured audit process itself
        return child_audit(argv[1:])
    return entry.main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
