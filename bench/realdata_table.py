"""Markdown of `mass bench realdata`'s JSON lines (bench/realdata_run.py): one section per
dataset (package, licence, S, R, watch with reasons and their Cramér's V with S on the
release), one row per method, then the scaling run."""

from __future__ import annotations


def _m(name) -> str:
    """A method name in a Markdown table cell (``|`` escaped)."""
    return str(name).replace("|", "\\|")


def _f(v, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _s(v: dict) -> str:
    """A suppressed attribute's worst judge: upper bound vs limit, and the balanced one."""
    mark = "ok" if v["ok"] else "**leaks**"
    bal = ""
    if "balanced_judges" in v:  # the worst balanced judge, named when it is not the same one
        judge = max(v["balanced_judges"], key=v["balanced_judges"].get)
        named = "" if judge == v["worst_judge"] else f" {judge}"
        bal = f"; bal. {v['balanced_judges'][judge]:.3f}/{v['balanced_limit']:.3f}{named}"
    return f"{v['ci_high']:.3f}/{v['limit']:.3f} {v['worst_judge']} {mark}{bal}"


def _lookup(v: dict) -> str:
    if "lookup" not in v:
        return f"{v['distinct']} (all distinct)"
    mark = "ok" if v["ok"] else "**leaks**"
    return (f"{v['distinct']}: {v['lookup']:.3f} vs base {v['majority']:.3f}, bal. "
            f"{v['lookup_balanced']:.3f} vs {v['chance']:.3f} {mark}")  # fmt: skip


def _cert(v: dict | None) -> str:
    """The certificate's balanced bound (accuracy bound), or why there is none."""
    if not v:
        return "-"
    if not v["certified"]:
        return "none (continuous)" if v["cells"] > v["rows"] // 2 else "none"
    return f"bal. {v['balanced']:.3f} (acc. {v['accuracy']:.3f}), {v['cells']} cells"


def _method_row(r: dict, watch: list[str]) -> str:
    s, sk = r["S"]["S"], r["S_key"]["S"]
    kept = [_f(v["kept"], ".2f") for v in r["R"].values()]
    wk = [_f(r["watch"][w]["kept"], ".2f") for w in watch]
    st = r["structure"]
    cells = [_m(r["method"]), _s(s), _s(sk) if sk is not s else "same", _lookup(r["lookup_key"]),
             _cert(r.get("certificate")), ", ".join(kept), ", ".join(wk),
             f"{st['knn_overlap']:.2f} / {st['cka']:.2f} / {st['dcor']:.2f}",
             "yes" if r["verdict"]["all"] else "no"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _section(rows: list[dict]) -> list[str]:
    h = rows[0]
    c = h["calibration"]
    if c.get("skipped"):
        chosen, cpu = f"nothing (skipped: {c['skipped']})", ""
    else:
        chosen = (f"{_m(c['chosen'])} (noise {c['noise']})" if c["rc"] == 0
                  else f"none: `mass train` exit {c['rc']} ({c.get('stopped')})")  # fmt: skip
        cpu = (f" in {c['calibration_cpu_seconds']:.0f} CPU-s ({c['calibration_seconds']:.0f} s "
               "wall)")  # fmt: skip
    watch = list(h["watch"])
    dep = rows[0]["watch"]
    out = [f"### {h['dataset']}: {h['package']}", "",
           f"Licence: {h['licence']}. {h['rows']:,} rows ({h['train_rows']:,} trained, "
           f"{h['release_rows']:,} released and judged), {h['dim']} dimensions. S = "
           f"{h.get('S_name', 'S')}; R = {', '.join(h['R'])}. Calibration chose {chosen}{cpu}. Judges: "
           f"{', '.join(h['families'])}, {h['folds']}-fold, at most {h['judge_rows']} rows.", "",
           "Watch attributes (chosen before any run) and their Cramér's V with S:"]  # fmt: skip
    for w in watch:
        v = max(x["cramers_v"] for x in dep[w]["dependence"].values())
        out.append(f"- `{w}` (V = {v:.2f}): {h.get('watch_reasons', {}).get(w, '')}")
    out += ["", "| method | S: upper bound / limit (release) | S, key stripped | distinct "
            "vectors: lookup | certificate | R kept | watch kept (" + ", ".join(watch) + ") | "
            "kNN / CKA / dCor within S | all targets |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    out += [_method_row(r, watch) for r in rows]
    return out + [""]


def _scaling(rows: list[dict]) -> list[str]:
    out = [f"### Scaling: {rows[0]['dataset']}, the same model ({rows[0].get('chosen')})", "",
           "| released rows | S, key stripped: upper bound / limit | balanced | distinct: "
           "lookup | certificate | R kept | watch kept |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "S_key" not in r:
            return out + [f"calibration failed: {r['calibration']}"]
        s = r["S_key"]
        mark = "ok" if s["ok"] else "**leaks**"
        out.append(f"| {r['release_rows']:,} | {s['ci_high']:.3f} / {s['limit']:.3f} "
                   f"{s['worst_judge']} {mark} | {s['balanced_ci_high']:.3f} vs "
                   f"{s['balanced_baseline']:.3f} | {_lookup(r['lookup_key'])} | "
                   f"{_cert(r.get('certificate'))} | "
                   f"{', '.join(_f(v, '.2f') for v in r.get('R_kept', {}).values())} | "
                   f"{', '.join(_f(v, '.2f') for v in r.get('watch_kept', {}).values())} |")  # fmt: skip
    return out + [""]


def _private(r: dict) -> bool:
    """S within the policy with the key stripped, by every judge and by the lookup."""
    return bool(r["verdict"]["s_key_ok"] and r["lookup_key"].get("ok", True))


def _weak_min(r: dict) -> float | None:
    """The least normalised information kept over the weakly tied watch attributes."""
    kept = [r["watch"][w]["kept"] for w in r["verdict"]["weak_watch"]]
    return min(kept) if kept else None


def _figures(r: dict) -> str:
    s = r["S_key"]["S"]
    kept = ", ".join(_f(v["kept"], ".2f") for v in r["R"].values())
    weak = _weak_min(r)
    return (f"S {s['ci_high']:.3f}/{s['limit']:.3f}, R {kept}, weak watch "
            f"{_f(weak, '.2f')}, {_cert(r.get('certificate'))}")  # fmt: skip


def summary(rows: list[dict]) -> list[str]:
    """One line per dataset: what calibration chose and how it fared, and the measured
    ceiling - the method meeting every target, else the private one keeping R that keeps the
    most of the weakly tied watch attributes (the lookup judge counted in privacy)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if not r.get("scaling"):
            by.setdefault(r["dataset"], []).append(r)
    out = ["| set | rows released | calibrated choice | its targets | measured ceiling |",
           "|---|---|---|---|---|"]  # fmt: skip
    for name, group in by.items():
        c = group[0]["calibration"]
        cal = next((r for r in group if r["method"] == "calibrated"), None)
        chosen = (_m(c["chosen"]) if c.get("rc") == 0 else
                  "skipped" if c.get("skipped") else f"refused ({c.get('stopped')})")  # fmt: skip
        fared = "-" if cal is None else (
            ("all met" if cal["verdict"]["all"] and _private(cal) else "not all: ")
            + ("" if cal["verdict"]["all"] and _private(cal) else _figures(cal)))  # fmt: skip
        ok = [r for r in group if r["method"] != "calibrated" and _private(r)
              and r["verdict"]["r_ok"]]  # fmt: skip
        met = [r for r in ok if r["verdict"]["watch_ok"]]
        if met:
            ceiling = "met by " + ", ".join(_m(r["method"]) for r in met)
        elif ok:
            best = max(ok, key=lambda r: -1.0 if _weak_min(r) is None else _weak_min(r))
            ceiling = (
                f"none meets all; best private with R kept: {_m(best['method'])} ({_figures(best)})"
            )
        else:
            ceiling = "no release is private with R kept"
        out.append(f"| {name} | {group[0]['release_rows']:,} | {chosen} | {fared} | {ceiling} |")
    return out + [""]


def markdown(rows: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    scale: dict[str, list[dict]] = {}
    for r in rows:
        (scale if r.get("scaling") else by).setdefault(r["dataset"], []).append(r)
    out: list[str] = summary(rows) if by else []
    for group in by.values():
        out += _section(group)
    for group in scale.values():
        out += _scaling(group)
    return "\n".join(out)
