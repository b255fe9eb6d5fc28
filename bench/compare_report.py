"""The report of `bench/compare.py`: compare.json, compare.md (who wins what), compare.png."""

from __future__ import annotations

import json

# Why a method wins a kind of column when it does (explains winners in the Markdown).
REASONS = {
    "privacy": {
        "gaussian": "isotropic noise hides every attribute alike: privacy paid for in utility",
        "gaussian_budget": "latent noise through a lossy VAE decode blurs every attribute alike",
        "genfilter": "a learned latent offset aimed at s plus a lossy VAE decode",
        "leace": "closed form: no linear probe on the release beats chance for s",
        "leace_quadratic": "also equalises class covariances, so quadratic probes fail too",
        "inlp": "projects out every linear direction that predicts s, including correlated ones",
        "unlearning": "its classifier-based MI penalty pushes s out of reach of the aux head",
        "end": "its Gram term decorrelates rows that share s",
        "raw": "the image edit removes the pixels carrying s (and much else)",
    },
    "utility": {
        "leace": "a rank-(k-1) edit that leaves everything orthogonal to s untouched",
        "leace_quadratic": "an affine map per class that keeps what s does not explain",
        "inlp": "only the directions predictive of s are removed",
        "unlearning": "its reconstruction term keeps nearly all of x",
        "end": "its target loss and entangling term pull same-p rows together",
        "gaussian": "small noise leaves most of x",
        "genfilter": "its utility classifier steers the offset away from p",
        "raw": "the image edit left the pixels carrying p",
    },
    "reconstruction": {
        "gaussian": "fresh noise per row cannot be inverted",
        "gaussian_budget": "the VAE bottleneck and latent noise lose the original detail",
        "genfilter": "the VAE bottleneck and latent noise lose the original detail",
        "raw": "the image edit threw information away before extraction",
        "inlp": "a projection discards the erased subspace for good",
    },
    "time": {"default": "closed form or nothing to fit"},
}
COLUMN_KIND = {"s frozen ↓": "privacy", "s worst attacker ↓": "privacy", "MI(s) nats ↓": "privacy",
               "p frozen ↑": "utility", "p best classifier ↑": "utility",
               "recon MSE ↑": "reconstruction", "recon cos ↓": "reconstruction",
               "AUM ↑": "privacy", "fit s ↓": "time"}  # fmt: skip


def reason(column: str, family: str) -> str:
    kind = REASONS.get(COLUMN_KIND.get(column, ""), {})
    return kind.get(family, kind.get("default", "see the method's module docstring"))


def write_json(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=float)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


COLUMNS = [  # (header, getter, higher_is_better)
    ("s frozen ↓", lambda r, s, p: r["attributes"][s]["frozen"], False),
    ("s worst attacker ↓", lambda r, s, p: r["attributes"][s]["max"], False),
    ("p frozen ↑", lambda r, s, p: r["attributes"][p]["frozen"] if p else None, True),
    ("p best classifier ↑", lambda r, s, p: r["attributes"][p]["max"] if p else None, True),
    ("recon MSE ↑", lambda r, s, p: r["reconstruction"]["mse"], True),
    ("recon cos ↓", lambda r, s, p: r["reconstruction"]["cosine"], False),
    ("MI(s) nats ↓", lambda r, s, p: r["mi_suppressed"][s], False),
    ("AUM ↑", lambda r, s, p: r.get("aum"), True),
    ("fit s ↓", lambda r, s, p: r["seconds"], False),
]


def _is_mass(r: dict) -> bool:
    return r["family"] == "mass"


def write_markdown(report: dict, path: str) -> None:
    lines = ["# Method comparison (`mass bench compare`)", "",
             f"Rows: train/val/test = {report['n']}. Held-out (test) accuracies; attackers are "
             "retrained on the released train split. 'worst attacker' = max over families; "
             "'best classifier' = the same max for a preserved attribute. Raw-domain rows "
             "(image blur/downsample/mask, re-extracted) are reference heuristics, not exportable "
             "modifiers.", ""]  # fmt: skip
    for task in report["tasks"]:
        s, p = task["suppress"][0], (task["preserve"] or [None])[0]
        rows = task["rows"]
        others = [a for a, v in rows[0]["attributes"].items() if v["role"] == "other"]
        maj = rows[0]["attributes"][s]["majority"]
        lines += [f"## Suppress {'+'.join(task['suppress'])}, preserve {'+'.join(task['preserve'])}",
                  "", f"Majority rate of {s}: {maj:.3f} (the best a suppressed attribute can get).",
                  ""]  # fmt: skip
        head = ["method", *[h for h, _, _ in COLUMNS], *[f"{o} best ↑" for o in others]]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            vals = [_fmt(g(r, s, p)) for _, g, _ in COLUMNS]
            vals += [_fmt(r["attributes"][o]["max"]) for o in others]
            lines.append(f"| {r['method']} | " + " | ".join(vals) + " |")
        lines += ["", "Who wins each column (the original row excluded):", ""]
        cands = [r for r in rows if r["method"] != "original"]
        for head_, get, higher in COLUMNS:
            scored = [(get(r, s, p), r) for r in cands if get(r, s, p) is not None]
            if not scored:
                continue
            best_v, best = (max if higher else min)(scored, key=lambda t: t[0])
            mass_rows = [(v, r) for v, r in scored if _is_mass(r)]
            if _is_mass(best):
                lines.append(f"- {head_}: **{best['method']}** ({best_v:.3f}).")
                continue
            mv, mr = (
                (max if higher else min)(mass_rows, key=lambda t: t[0])
                if mass_rows
                else (None, None)
            )
            vs = f"; best MaSS row {mr['method']} has {mv:.3f}" if mr else ""
            if COLUMN_KIND.get(head_) == "privacy" and p is not None:  # a win at zero utility
                vs += f"; its {p} best classifier is {best['attributes'][p]['max']:.3f}"
            lines.append(
                f"- {head_}: **{best['method']}** wins ({best_v:.3f}{vs}) — "
                f"{reason(head_, best['family'])}."
            )
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(report["tasks"])
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 5.5), squeeze=False)
    for ax, task in zip(axes[0], report["tasks"], strict=True):
        s, p = task["suppress"][0], (task["preserve"] or [None])[0]
        for r in task["rows"]:
            if p is None:
                continue
            x, y = r["attributes"][s]["max"], r["attributes"][p]["max"]
            marker = {"mass": "*", "raw": "s", "original": "D"}.get(r["family"], "o")
            ax.scatter(x, y, marker=marker, s=90 if marker == "*" else 40)
            ax.annotate(r["method"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axvline(task["rows"][0]["attributes"][s]["majority"], ls="--", c="grey", lw=0.8)
        ax.set_xlabel(f"worst retrained attacker on {s} (lower = more private)")
        ax.set_ylabel(f"best classifier on {p} (higher = more useful)")
        ax.set_title(f"suppress {s} / preserve {p}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
