"""The demo's closing summary (`make demo`) and the pipeline's DVC metrics, from audit.json.

    python -m mass.demo.summary --audit reports/audit/audit.json --release release \
        [--report reports/audit/report.html] [--owner-key .mass/owner.key]
        [--run-dir runs/modifier --metrics metrics/summary.json]

Says where the release is and how many rows it has, the audit verdict, per suppressed
attribute the worst retrained attacker and its 95% upper bound against the limit (and a cell
release's certified bound on any attacker, or why it has none), per
preserved attribute the fraction of its original accuracy that was kept against the policy's
minimum, and what it keeps that no flag named (watch attributes, label-free structure;
a last-resort release says it is data minimisation). Exit status 0 when the audit passed, 1 when it failed (the numbers still print).

``--metrics FILE`` also writes :func:`metrics` there: the dozen numbers that compare runs
(dvc.yaml's only metrics file, so `dvc exp show` shows them first; audit.json, an output,
holds the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mass.report.view import certificate_text, unjudged_key_view


def _num(v) -> str:
    return "-" if v is None else f"{float(v):.3f}"


def _limit(a: dict) -> str:
    """``limit 0.550``, or each judge family's own limit when the margins differ."""
    from mass.report.view import family_limits

    fams = family_limits(a)
    if fams is not None:
        return "limits " + ", ".join(f"{f} {_num(v)}" for f, v in fams.items())
    return f"limit {_num(a.get('limit'))}"


def summarize(audit: dict, release: str) -> list[str]:
    passed = bool(audit.get("pass"))
    rows = (audit.get("rows") or {}).get("release")
    where = os.path.abspath(release) + os.sep
    if passed:
        lines = [f"Release:      {where} ({rows:,} rows)" if rows is not None else
                 f"Release:      {where}"]  # fmt: skip
    else:
        lines = [f"Release:      not published (the audit failed; staged rows: {rows})"]
    exp = audit.get("expectations") or {}
    lines.append(f"Audit:        {'PASSED' if passed else 'FAILED'} "
                 f"({exp.get('evaluated', '?')} expectations, {exp.get('failed', '?')} failed)")  # fmt: skip
    policy = audit.get("policy") or {}
    attrs = audit.get("attributes") or {}
    width = max((len(a) for a in attrs), default=0)
    for name, a in attrs.items():
        verdict = "ok" if a.get("pass") else "FAIL"
        if a.get("role") == "suppressed":
            bound = max((v for v in (a.get("ci_high") or {}).values() if v is not None),
                        default=None)  # fmt: skip
            status = unjudged_key_view(audit, a)  # failed closed: say why
            why = "" if status is None else f" (key-compromised view not judged: {status})"
            lines.append(
                f"Suppressed:   {name:<{width}}  worst attacker {_num(a.get('worst'))}, "
                f"95% bound {_num(bound)} vs {_limit(a)}  {verdict}{why}"
            )
            if (cert := certificate_text(a)) is not None:  # the bound on any attacker
                lines.append(f"Certificate:  {name:<{width}}  {cert}")
        elif a.get("role") == "preserved":
            need = (policy.get("preserve") or {}).get(name, policy.get("min_utility_fraction"))
            lines.append(
                f"Preserved:    {name:<{width}}  kept {_num(a.get('retention'))} of its original "
                f"accuracy (minimum {_num(need)})  {verdict}"
            )
    return lines + unnamed_summary(audit, width)


def unnamed_summary(audit: dict, width: int = 0) -> list[str]:
    """What the release keeps that no flag named: each watch attribute's normalised
    information kept, the label-free structure, and the data-minimisation statement of a
    last-resort release (mass.report.unnamed)."""
    from mass.report import unnamed as RU

    lines = []
    min_kept = (audit.get("policy") or {}).get("watch_min_kept")
    for name, w in RU.watch_rows(audit).items():
        dep = ", ".join(f"V({s}) {_num(d.get('cramers_v'))}"
                        for s, d in (w.get("dependence") or {}).items())  # fmt: skip
        kept = ("nothing learnable" if w.get("kept") is None
                else f"kept {_num(w.get('kept'))}{RU.spread(w)} of its information")  # fmt: skip
        lines.append(f"Unnamed:      {name:<{width}}  {kept} (release {_num(w.get('release'))}, "
                     f"original {_num(w.get('original'))}, majority {_num(w.get('majority'))}; "
                     f"{dep})" + (f"  minimum {_num(min_kept)}" if min_kept is not None else ""))  # fmt: skip
    if (cap := RU.capacity_of(audit)) is not None:
        lines.append(f"Capacity:     {cap.removeprefix('Capacity: ')}")
    st = RU.unnamed_of(audit).get("structure")
    if isinstance(st, dict):
        last = (RU.unnamed_of(audit).get("structure_reference") or {}).get("last_resort") or {}
        ref = (f" (last resort {_num(last.get('knn_overlap'))} / {_num(last.get('cka'))})"
               if last else "")  # fmt: skip
        lines.append(f"Structure:    kNN overlap {_num(st.get('knn_overlap'))}, CKA "
                     f"{_num(st.get('cka'))} within S (identity 1){ref}")  # fmt: skip
    if RU.is_minimisation((audit.get("release") or {}).get("method")):
        lines.append(f"NOTE:         {RU.MINIMISATION}")
    return lines


def _worst_bound(a: dict) -> float | None:
    return max((v for v in (a.get("ci_high") or {}).values() if v is not None), default=None)


def _rounded(v):
    return round(v, 4) if isinstance(v, float) else v


def _suppressed_row(a: dict) -> dict:
    """A suppressed attribute's worst 95 % bound and its limit (mixed margins: the judge
    furthest over its own limit), and its certified bounds (null without a certificate)."""
    bound, limit = _worst_bound(a), a.get("limit")
    if isinstance(limit, dict):
        over = {j: v - limit[j] for j, v in (a.get("ci_high") or {}).items()
                if v is not None and limit.get(j) is not None}  # fmt: skip
        j = max(over, key=over.__getitem__, default=None)
        bound, limit = (None, None) if j is None else (a["ci_high"][j], limit[j])
    cert = a.get("certificate") if isinstance(a.get("certificate"), dict) else {}
    return {"bound": bound, "limit": limit, "certified_accuracy": cert.get("accuracy"),
            "certified_balanced": cert.get("balanced")}  # fmt: skip


def metrics(audit: dict, run: dict | None = None) -> dict:
    """One run's comparable numbers: the DVC metrics file, about a dozen keys, stable across
    runs, so plain `dvc exp show` compares experiments on them (the rest of the audit, e.g.
    frozen readings, each watch attribute, structure and seconds, stays in audit.json).

    ``pass``; ``privacy_excess``: over the suppressed attributes, the largest worst-judge 95 %
    bound minus its limit (<= 0 passes); ``utility_kept``: the smallest kept fraction over the
    preserved ones; ``watch_kept``: the smallest normalised kept information over the watch
    attributes (audit.json ``unnamed``; absent without any), and for a cell release the
    ``cells`` (distinct released vectors) and whether the watch attributes' bits fit in them
    (``watch_fits``, audit.json ``unnamed.capacity``). These mean the same whatever the
    attributes are called, so experiments that suppress different attributes still sort on
    them, and they come first: `dvc exp show` keeps the first columns of a table too wide for
    the terminal. Then the chosen ``method``, calibration ``candidate`` and output ``noise``
    (``run``: the training run's metrics.json), released ``rows``, and per suppressed
    attribute its bound, limit and certified bounds, per preserved one its kept fraction.
    """
    run = run or {}
    cal = run.get("calibration") or {}
    attrs = audit.get("attributes") or {}
    suppressed = {n: _suppressed_row(a) for n, a in attrs.items() if a.get("role") == "suppressed"}
    preserved = {n: {"kept": a.get("retention")} for n, a in attrs.items()
                 if a.get("role") == "preserved"}  # fmt: skip
    excess = [r["bound"] - r["limit"] for r in suppressed.values()
              if r["bound"] is not None and r["limit"] is not None]  # fmt: skip
    kept = [r["kept"] for r in preserved.values() if r["kept"] is not None]
    out: dict = {
        "pass": bool(audit.get("pass")),
        "privacy_excess": max(excess, default=None),
        "utility_kept": min(kept, default=None),
    }
    watch = [w.get("kept") for w in ((audit.get("unnamed") or {}).get("watch") or {}).values()]
    if watch:
        out["watch_kept"] = min((k for k in watch if k is not None), default=None)
    cap = (audit.get("unnamed") or {}).get("capacity")
    if isinstance(cap, dict):  # a cell release with watch attributes: its resolution
        out["cells"], out["watch_fits"] = cap.get("cells"), cap.get("watch_fits")
    out["method"] = (audit.get("release") or {}).get("method") or run.get("method")
    out["candidate"], out["noise"] = cal.get("candidate"), cal.get("output_noise")
    out["rows"] = (audit.get("rows") or {}).get("release")
    out.update({k: v for k, v in (("suppressed", suppressed), ("preserved", preserved)) if v})
    return _round_tree(out)


def _round_tree(d):
    if isinstance(d, dict):
        return {k: _round_tree(v) for k, v in d.items()}
    return _rounded(d)


def write_metrics(path: str, audit: dict, run_dir: str | None) -> None:
    from mass.errors import MassError
    from mass.rundir import read_metrics

    run = None
    if run_dir:
        try:
            run = read_metrics(run_dir)
        except MassError as e:
            print(f"{e}; method and noise from audit.json only", file=sys.stderr)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(metrics(audit, run), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mass.demo.summary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--audit", required=True, help="the audit's audit.json")
    p.add_argument("--release", required=True, help="the release directory")
    p.add_argument("--report", help="the audit's report.html (printed as is)")
    p.add_argument("--owner-key", help="the owner key file (printed with a warning)")
    p.add_argument("--metrics", help="also write the comparable metrics (JSON) to this file")
    p.add_argument("--run-dir", help="the training run (its metrics.json: method, noise, seconds)")
    p.add_argument("--quiet", action="store_true",
                   help="write --metrics only, print nothing (the DVC stage: `make demo` prints "
                   "the summary once, after the pipeline)")  # fmt: skip
    args = p.parse_args(argv)
    try:
        with open(args.audit) as f:
            audit = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{args.audit}: no readable audit.json ({e}); did the pipeline reach the audit?",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.metrics:
        write_metrics(args.metrics, audit, args.run_dir)
    if args.quiet:
        return 0 if audit.get("pass") else 1
    lines = summarize(audit, args.release)
    if args.report:
        lines.append(f"Audit report: {os.path.abspath(args.report)}")
    if args.owner_key:
        lines.append(f"Owner key:    {args.owner_key} (keyed release noise + export signatures; "
                     "never commit or share it)")  # fmt: skip
    print("\n".join(lines))
    return 0 if audit.get("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
