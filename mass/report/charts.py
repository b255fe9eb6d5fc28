"""The page's figures, drawn from audit.json numbers (PNG bytes for data URIs).

Each function returns None when audit.json has nothing to draw, so an older audit yields a
shorter page rather than an empty axis.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from mass.report import view

_PASS, _FAIL = "#1a7f37", "#cf222e"


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # headless: CI, DVC stages and `mass report` have no display
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    _plt().close(fig)
    return buf.getvalue()


def privacy_utility(audit: Mapping) -> bytes | None:
    """Left: each judge's accuracy on the release per suppressed attribute (whisker to the
    upper 95% bound when known), with the baseline max(majority, floor) and the limit.
    Right: retention per preserved attribute with the required minimum (dashed)."""
    sup, pre = view.by_role(audit, "suppressed"), view.by_role(audit, "preserved")
    if not sup and not pre:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [2, 1]}, squeeze=True
    )
    names = list(sup)
    jnames = list(dict.fromkeys(j for row in sup.values() for j in view.judges(row)))
    width = 0.8 / max(len(jnames), 1)
    for k, judge in enumerate(jnames):
        xs, ys, err = [], [], []
        for i, name in enumerate(names):
            acc = view.judges(sup[name]).get(judge)
            if acc is None:
                continue
            hi = view.per_judge(sup[name], "ci_high", judge)
            xs.append(i + (k - (len(jnames) - 1) / 2) * width)
            ys.append(acc)
            err.append(max(hi - acc, 0.0) if hi is not None else 0.0)
        ax1.bar(xs, ys, width, label=judge, yerr=[[0.0] * len(err), err], capsize=3)
        lims = [(x, view.limit(sup[n], "limit", judge)) for x, n in zip(xs, names, strict=False)]
        lims = [(x, v) for x, v in lims if v is not None]
        if lims:
            ax1.scatter(*zip(*lims, strict=True), marker="_", s=400, color=_FAIL, zorder=3,
                        label="limit" if k == 0 else None)  # fmt: skip
    for i, name in enumerate(names):
        base = max(view.num(sup[name].get("majority")) or 0.0,
                   view.num(sup[name].get("floor")) or 0.0)  # fmt: skip
        ax1.hlines(base, i - 0.45, i + 0.45, colors="black", linestyles="dotted",
                   label="max(majority, floor)" if i == 0 else None)  # fmt: skip
    ax1.set_xticks(range(len(names)), names)
    ax1.set_ylim(0, 1.05)
    ax1.set_ylabel("accuracy on the release")
    ax1.set_title("privacy: suppressed attributes (lower is better)")
    if names:
        ax1.legend(fontsize=8, ncol=2, loc="upper right")
    pnames = list(pre)
    ret = [view.num(pre[n].get("retention")) for n in pnames]
    mins = [view.min_fraction(audit, n) for n in pnames]
    colors = [_PASS if pre[n].get("pass") else _FAIL for n in pnames]
    ax2.bar(range(len(pnames)), [r or 0.0 for r in ret], 0.6, color=colors)
    for i, m in enumerate(mins):
        if m is not None:
            ax2.hlines(m, i - 0.4, i + 0.4, colors=_FAIL, linestyles="dashed")
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.set_xticks(range(len(pnames)), pnames)
    ax2.set_ylabel("best attacker on release / on original")
    ax2.set_title("utility: preserved (dashed: minimum)")
    fig.tight_layout()
    return _png(fig)


def learning_curves(audit: Mapping) -> bytes | None:
    """Accuracy vs fraction of training rows per family, one panel per attribute."""
    rows = {n: c for n, row in view.attributes(audit).items() if (c := view.curves(row))}
    if not rows:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
    for ax, (name, fams) in zip(axes[0], rows.items(), strict=True):
        for fam, pts in fams.items():
            xs, ys = zip(*sorted(pts), strict=True)
            ax.plot(xs, ys, marker="o", label=fam)
        lim = view.limit(view.attributes(audit)[name], "limit", next(iter(fams)))
        if lim is not None:
            ax.axhline(lim, color=_FAIL, linestyle="dashed", label="limit")
        ax.set_title(f"{name}: attacker learning curve")
        ax.set_xlabel("fraction of training rows")
        ax.set_ylabel("accuracy on the release")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def key_compromised(audit: Mapping) -> bytes | None:
    """Per suppressed attribute: each family's accuracy with and without the owner's key."""
    rows = {n: kc for n, row in view.attributes(audit).items() if (kc := view.key_compromised(row))}
    if not rows:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
    for ax, (name, kc) in zip(axes[0], rows.items(), strict=True):
        row = view.attributes(audit)[name]
        fams = list(kc)
        normal = [view.judges(row).get(f) or 0.0 for f in fams]
        with_key = [v or 0.0 for v in kc.values()]
        xs = range(len(fams))
        ax.bar([x - 0.2 for x in xs], normal, 0.4, label="attacker without the key")
        ax.bar([x + 0.2 for x in xs], with_key, 0.4, color=_FAIL, label="attacker with the key")
        ax.set_xticks(list(xs), fams)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{name}: if the owner key leaked")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)
