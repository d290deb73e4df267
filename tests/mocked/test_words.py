"""The code says why, briefly, and what users read cites no build log or issue.

Before the words were cut (34113c3): 3721 lines of words against 13253 of code, 0.28.
The bound below is about half of that, so the words do not creep back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.words import count, count_tree, python_files

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "components", ROOT / "scripts", ROOT / "__main__.py"]
MAX_RATIO = 0.16
MAX_MODULE_DOCSTRING_LINES = 8
#: What a message would cite that a user cannot look up: our build logs and our issues.
CITATION = re.compile(r"\bseeds? \d{3}\b|\bseed 000\b|\bissue #?\d+\b", re.IGNORECASE)


def modules() -> list[Path]:
    return [p for root in SOURCES for p in python_files(root)]


def test_words_per_line_of_code_stay_about_half_of_what_they_were() -> None:
    total = sum((count_tree(root) for root in SOURCES[1:]), count_tree(SOURCES[0]))
    assert total.ratio <= MAX_RATIO, f"{total.words} / {total.code} = {total.ratio:.2f}"


def test_the_counter_counts_comments_and_docstrings_as_words() -> None:
    text = '"""Doc,\ntwo lines."""\n\nX = 1  # why\n# alone\ndef f() -> None:\n    """One."""\n'
    found = count(text)
    assert (found.words, found.code) == (5, 2)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_docstrings_are_short(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    lines = len(doc.strip("\n").splitlines())
    assert lines <= MAX_MODULE_DOCSTRING_LINES, f"{lines} lines: the rest belongs in docs/"


def user_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are not docstrings: messages, help, reports."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def citations(text: str) -> list[tuple[int, str]]:
    return [(line, s) for line, s in user_strings(ast.parse(text)) if CITATION.search(s)]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_message_cites_a_build_log_or_an_issue(path: Path) -> None:
    assert not citations(path.read_text())


def test_the_citation_check_finds_one_in_a_message_not_in_a_docstring() -> None:
    text = (
        '"""Measured in seed 000."""\n'
        "def f() -> str:\n"
        '    """Issue 22 added it."""\n'
        "    return f'bad value (seed 000 Part 2), see issue 31'\n"
    )
    assert [line for line, _ in citations(text)] == [4]
