"""privacy_utility.png: each judge's leakage above the baseline, and utility retention."""

from __future__ import annotations

import os

from mass.audit.runner import AuditResult


def plot_privacy_utility(result: AuditResult, path: str) -> str:
    """Left: each judge's 95 % upper bound of accuracy minus max(majority, floor) per
    suppressed attribute (the number the rule judges), with
    each judge's allowed margin as a tick. Right: retention per preserved attribute, with
    the required minimum fraction as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and DVC stages have no display
    import matplotlib.pyplot as plt

    sup = [r for r in result.reports if r.role == "suppressed"]
    pre = [r for r in result.reports if r.role == "preserved"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    judges = list(dict.fromkeys(j for r in sup for j in r.accuracies))
    width = 0.8 / max(len(judges), 1)
    for k, judge in enumerate(judges):
        xs = [i + (k - (len(judges) - 1) / 2) * width for i in range(len(sup))]
        ys = [r.ci_high.get(judge, r.accuracies.get(judge, float("nan"))) - r.baseline
              for r in sup]  # fmt: skip
        ax1.bar(xs, ys, width, label=judge)
        lim = [r.margins.get(judge, float("nan")) for r in sup]
        ax1.scatter(xs, lim, marker="_", s=300, color="red", zorder=3,
                    label="allowed margin" if k == 0 else None)  # fmt: skip
    ax1.axhline(0.0, color="black", linewidth=0.8)
    ax1.set_xticks(range(len(sup)), [r.name for r in sup])
    ax1.set_ylabel("95% upper bound on x' - max(majority, floor)")
    ax1.set_title("privacy: suppressed attributes (lower is better)")
    if judges:
        ax1.legend(fontsize=8, ncol=2)
    ret = [r.retention if r.retention is not None else float("nan") for r in pre]
    colors = ["tab:green" if (r.retention or 0) >= (r.min_fraction or 0) else "tab:red"
              for r in pre]  # fmt: skip
    ax2.bar(range(len(pre)), ret, 0.6, color=colors)
    for i, r in enumerate(pre):
        ax2.hlines(r.min_fraction, i - 0.4, i + 0.4, colors="red", linestyles="dashed")
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.set_xticks(range(len(pre)), [r.name for r in pre])
    ax2.set_ylabel("best attacker on x' / on x")
    ax2.set_title("utility: preserved (dashed: min fraction)")
    verdict = "PASSED" if result.success else "FAILED"
    fig.suptitle(f"MaSS-ETL audit {verdict}: {result.counts['audited']} rows")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
