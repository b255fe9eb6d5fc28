"""Every relative link in the README and docs/ resolves (issue 25 item 6).

Measured numbers live in one doc and are linked from the others, and dated runs moved to
``docs/journal/``; a link that points at a moved file or a renamed heading would leave a reader
with nothing. Checked: the file exists, and a ``#anchor`` into a markdown file names one of its
headings (GitHub's slugs: lower case, punctuation dropped, spaces to ``-``, ``-1`` ... for
repeats). Links with a scheme (``https:``) are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6}\s+(.*)")


def slugs(text: str) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for path in paths:
        fenced = False
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            for url in [] if fenced else LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", url):
                    continue
                target, _, anchor = url.partition("#")
                file = (path.parent / target).resolve() if target else path
                if not file.exists():
                    bad.append(f"{path.relative_to(root)}:{lineno}: no file {url}")
                elif anchor and file.suffix == ".md" and anchor not in slugs(file.read_text()):
                    bad.append(
                        f"{path.relative_to(root)}:{lineno}: no heading #{anchor} in {target}"
                    )
    return bad


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_in_the_readme_and_docs_resolves():
    bad = broken_links(docs())
    assert not bad, "broken links (fix the path or the #heading):\n  " + "\n  ".join(bad)


def test_the_check_sees_a_broken_link(tmp_path):
    (tmp_path / "b.md").write_text("# Current figures: run 8 (2026-11-23)\n\n## Two\n## Two\n")
    a = tmp_path / "a.md"
    a.write_text(
        "[ok](b.md#current-figures-run-8-2026-11-23) [ok](b.md#two-1) [web](https://x.org/y)\n"
        "[gone](journal/none.md) [renamed](b.md#run-8)\n```\n[code](not/checked.md)\n```\n"
    )
    assert broken_links([a], tmp_path) == [
        "a.md:2: no file journal/none.md",
        "a.md:2: no heading #run-8 in b.md",
    ]
