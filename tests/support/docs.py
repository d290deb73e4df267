"""The project's documentation as the tests read it: README.md and the pages in docs/.

The README is short (what it is, prerequisites, quickstart, costs, the output contract, the test
command); each topic has its page in docs/. Content tests name the page that holds the text they
check, so moving a paragraph to another page means changing the test that reads it: `read_doc`
fails on a page that does not exist, and `section` on a heading that is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def doc_path(name: str) -> Path:
    """`README` is README.md; any other name is docs/NAME.md."""
    return README if name == "README" else DOCS / f"{name}.md"


def read_doc(name: str) -> str:
    """The text of README.md (`README`) or of docs/NAME.md."""
    return doc_path(name).read_text()


def doc_pages() -> list[Path]:
    """README.md and every page in docs/, README first."""
    return [README, *sorted(DOCS.glob("*.md"))]


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of every ATX heading outside fenced code blocks."""
    found: list[tuple[int, str, int]] = []
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2), index))
    return found


def section(text: str, heading: str) -> str:
    """The section whose heading title is `heading` (any level), up to the next heading of the
    same or a higher level; the heading line included."""
    lines = text.splitlines()
    marks = headings(text)
    for position, (level, title, start) in enumerate(marks):
        if title == heading:
            end = next((i for lv, _, i in marks[position + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[start:end]) + "\n"
    raise KeyError(f"no heading {heading!r}; headings: {[t for _, t, _ in marks]}")
