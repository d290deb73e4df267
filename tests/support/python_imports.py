"""What a Python file of the repository imports, read from its source with `ast` (nothing is
imported), for the tests that hold the layout's rules: components/ (tests/mocked/test_layout.py)
and tests/ (tests/mocked/test_tests_layout.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path = ROOT) -> str:
    """`components/vm/tpu.py` -> `components.vm.tpu`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parse(path: Path) -> ast.Module:
    """`ast.parse` of a file, once more on CPython 3.11.7's spurious "AST constructor recursion
    depth mismatch" SystemError, which another thread's compile at the same moment can cause
    (the AST validator's depth counter is shared; CPython gh-106905). Seen once in a full run."""
    text = path.read_text()
    try:
        return ast.parse(text)
    except SystemError as error:
        if "recursion depth mismatch" not in str(error):
            raise
        return ast.parse(text)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, as absolute names; `from A import b` counts as both `A`
    and `A.b` (b may be a submodule), relative imports resolved against the package."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from ... import` names, relative levels resolved in `package`."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base
