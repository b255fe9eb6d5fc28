"""Every measured number lives in one reference doc (issue 25 item 6).

The README and the reference docs (``docs/*.md``) quote a measurement in one place and link it
from the others; dated run logs live in ``docs/journal/``, which is a log and is not checked.
A number counts as measured when it looks like one: a decimal with two or more places
(``0.150``, ``1.85``), a figure with a throughput or size unit (``7,240 rows/s``, ``616 MiB``,
``4.87 CPU-s``), or an integer with thousands separators (``1,450``). Its *context* is the
unit, else the nearest word before it (in a table cell with no word before it: the column's
whole header), so ``digit 0.117`` in two docs is one number quoted twice, while ``0.117`` as two
different judges' accuracies is not. Code (fenced blocks and inline spans) is skipped: flags
and settings are not measurements. Definitions that several docs legitimately state (policy
limits, constants of the code, the demo's fixed sizes) are in ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# "number" (any context) or "number@context": why it is a definition, not a measurement.
ALLOWED = {
    "0.05": "the policy's attacker margin (params.yaml audit.attacker_margin) and the MaSS "
    "candidates' training output noise (mass/calibrate/space.py)",
    "0.03@noise": "a bench configuration's output noise (bench/adaptive_study.py settings)",
    "0.03@output_noise": "the same configuration, as its params key",
    "0.005@lr": "the MaSS learning rate (mass/calibrate/space.py)",
    "0.100@majority": "the demo's digit majority rate: 10 balanced classes by construction",
    "0.122@majority": "the demo's colour majority rate (mass prepare's colouring)",
    "0.340@majority": "the demo's thickness majority rate (tertiles within each digit)",
    "0.96": "the majority rate of a 4 %-prevalence attribute, a worked example",
    "1.000": "perfect accuracy: a bound, not a figure one quotes from another doc",
    "0.000": "zero: a bound, not a figure one quotes from another doc",
    "1.645": "SAFETY_SE, the validation margin in standard errors (mass/calibrate/judge.py)",
    "1.96": "z of the policy's 95 % bound",
    "3.11": "the required Python version",
    "1,000": "the demo's validation and test split sizes (mass prepare)",
    "65,536": "the release writer's row-group size (transforms/parquet_io.py)",
    "2,000@most": "the label-free structure's row cap (mass/metrics/unnamed.py)",
    "200,000": "the audit's partition_rows and mass train's --max-rows default",
    "20,000": "the audit's and the frozen judges' attacker sample cap (max_rows)",
    "0.02@less": "the 'nothing learnable' threshold over the majority (mass/metrics/unnamed.py)",
    "0.131@judge": "two different judges that read the same value (the frozen digit judge in "
    "bench_compare.md, a remapped judge of the transductive repair in calibration.md)",
}

UNIT = r"(?:rows/CPU-s|rows/s|CPU-s|KiB|MiB|GiB|KB|MB|GB)"
NUMBER = re.compile(
    r"(?<![\w.\-/])"
    r"(\d+(?:\.\d+)?(?=\s?" + UNIT + r"(?![\w/]))"  # any figure with a unit
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,450
    r"|\d+\.\d{2,})"  # 0.150; not a version (next check)
    r"(?![.\d])(?:\s?(" + UNIT + r")(?![\w/]))?"
)
WORD = re.compile(r"[A-Za-z][A-Za-z_\-]+")
STOP = frozenset(
    "a an the of at on in to by for is was and or vs with its it from as be are were than "
    "this that per".split()
)
CODE_SPAN = re.compile(r"`[^`]*`")


def reference_docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _last_word(text: str) -> str:
    words = [w.lower() for w in WORD.findall(text) if w.lower() not in STOP]
    return words[-1] if words else ""


def numbers(text: str):
    """(number, context, line number) of every measured-looking number in a markdown text."""
    fenced, header, previous = False, [], ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        line = CODE_SPAN.sub(" ", raw).replace("\\|", "\\/")  # an escaped pipe is no column
        if fenced or not line.strip():
            header = [] if not line.lstrip().startswith("|") else header
            continue
        cells = line.split("|") if line.lstrip().startswith("|") else None
        if cells is not None and not header:
            header = [" ".join(c.lower().split()) for c in cells]
        for m in NUMBER.finditer(line):
            context = m.group(2) or _last_word(line[: m.start()].split("|")[-1])
            if not context and cells is not None:
                column = line[: m.start()].count("|")
                context = header[column] if column < len(header) else ""
            yield m.group(1), context or previous, lineno
        previous = _last_word(line) or previous


def allowed(number: str, context: str) -> bool:
    return number in ALLOWED or f"{number}@{context}" in ALLOWED


def duplicates(paths: list[Path]) -> dict[tuple[str, str], list[str]]:
    """(number, context) -> 'file:line' where it appears, for those in two or more docs."""
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in paths:
        for number, context, lineno in numbers(path.read_text()):
            if not allowed(number, context):
                where[(number, context)].append(f"{path.name}:{lineno}")
    return {k: v for k, v in where.items() if len({s.split(":")[0] for s in v}) > 1}


def test_the_readme_and_reference_docs_quote_no_measured_number_twice():
    found = duplicates(reference_docs())
    assert not found, (
        "a measured number is quoted in two reference docs: keep it in one and link it from "
        "the other (dated runs go to docs/journal/), or add it to ALLOWED if it is a "
        "definition:\n  "
        + "\n  ".join(f"{n} ({c or 'no context'}): {', '.join(v)}" for (n, c), v in found.items())
    )


def test_the_check_sees_a_number_quoted_twice(tmp_path):
    """The rule itself: a quote in two docs is caught by its unit or its context word; the same
    value in another context, a version, code and allowed definitions are not."""
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(
        "The job ran at 7,240 rows/s, digit bound 0.158, Python 3.11.4.\n\n"
        "| attribute | logreg |\n|---|---|\n| digit | 0.117 |\n"
    )
    b.write_text(
        "Quoted: 7,240 rows/s and the digit bound 0.158; torch 2.13.0; `--margin 0.117`; "
        "colour 0.117; margin 0.05.\n```\nlimit 0.158\n```\n"
    )
    found = duplicates([a, b])
    assert set(found) == {("7,240", "rows/s"), ("0.158", "bound")}, found
    assert ("0.117", "logreg") in {(n, c) for n, c, _ in numbers(a.read_text())}


def test_the_journal_is_not_a_reference_doc():
    names = {p.relative_to(ROOT).as_posix() for p in reference_docs()}
    assert "README.md" in names and "docs/performance.md" in names
    assert not any(n.startswith("docs/journal/") for n in names)
