"""Every public name a module of the program defines is used somewhere: dead helpers go.

Deliberately simple: a top-level name of `components/` whose word appears nowhere else in the
project's Python (program, scripts, tests) is unused.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def top_level_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n != "__all__"]


def unused(sources: dict[str, str], under: str) -> list[str]:
    words = Counter(re.findall(r"\w+", "\n".join(sources.values())))
    found = []
    for path, text in sources.items():
        if not path.startswith(under):
            continue
        for name in top_level_names(ast.parse(text)):
            if words[name] <= 1:
                found.append(f"{path}: {name}")
    return found


def project_sources() -> dict[str, str]:
    paths = [ROOT / "__main__.py"]
    for folder in ("components", "scripts", "tests", "benchmarks"):
        paths += (ROOT / folder).rglob("*.py")
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_every_public_name_of_components_is_used() -> None:
    assert not unused(project_sources(), "components/")


def test_the_check_finds_a_name_nothing_uses() -> None:
    sources = {
        "components/a.py": "def used() -> int:\n    return 1\n\n\ndef dead() -> None:\n    pass\n",
        "components/b.py": "from components.a import used\n\nX = used()\n",
    }
    assert unused(sources, "components/") == ["components/a.py: dead", "components/b.py: X"]
