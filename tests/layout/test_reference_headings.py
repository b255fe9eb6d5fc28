"""Reference docs stay reference: the README's and docs/*.md headings name topics, never an
issue, a session, a run or a date (run history lives in docs/journal/, which is dated by
design)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATED = re.compile(r"\b(issue|session|round)s?\s*#?\d+|\brun \d+\b|\b20\d\d-\d\d(-\d\d)?\b",
                   re.IGNORECASE)  # fmt: skip


def dated_headings() -> list[str]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    out = []
    for path in docs:
        fenced = False
        for n, line in enumerate(path.read_text().splitlines(), 1):
            fenced ^= line.startswith("```")
            if not fenced and line.startswith("#") and DATED.search(line):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line}")
    return out


def test_reference_headings_name_topics_not_issues_sessions_or_dates():
    found = dated_headings()
    assert not found, "headings naming an issue, session, run or date (move the run to "
    "docs/journal/, name the topic):\n  " + "\n  ".join(found)


if __name__ == "__main__":
    print("\n".join(dated_headings()) or "none")
