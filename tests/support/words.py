"""How much of the code is words: comment and docstring lines against lines of code.

A line that holds a comment or belongs to a docstring counts as words; a line with any other
token counts as code (code with a trailing comment counts as both). Used by
tests/mocked/test_words.py; by hand: `python -m tests.support.words components scripts`.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LAYOUT_TOKENS = {
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


@dataclass(frozen=True)
class Count:
    words: int
    code: int

    def __add__(self, other: Count) -> Count:
        return Count(self.words + other.words, self.code + other.code)

    @property
    def ratio(self) -> float:
        return self.words / max(self.code, 1)


def docstring_lines(tree: ast.AST) -> set[int]:
    """Lines of every bare string statement: docstrings and attribute docstrings alike."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def count(text: str) -> Count:
    docs = docstring_lines(ast.parse(text))
    comments: set[int] = set()
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in LAYOUT_TOKENS:
            code.update(range(token.start[0], token.end[0] + 1))
    words = comments | docs
    return Count(len(words), len(code - docs))


def python_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    yield from (p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts)


def count_tree(root: Path) -> Count:
    total = Count(0, 0)
    for path in python_files(root):
        total += count(path.read_text())
    return total


def main(argv: list[str]) -> int:
    total = Count(0, 0)
    for name in argv or ["components", "scripts", "__main__.py"]:
        part = count_tree(Path(name))
        total += part
        print(f"{name}: {part.words} lines of words, {part.code} of code, ratio {part.ratio:.2f}")
    print(f"all: {total.words} / {total.code} = {total.ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
