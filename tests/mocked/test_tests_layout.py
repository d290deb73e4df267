"""The tests/ layout's rules (docs/testing.md, "Where each layer lives"), read from the files:

- tests/ holds the layers' directories and support/, with conftest.py and __init__.py, and
  nothing else, so that `ls tests` shows the layers;
- a layer's directory holds test modules (test_*.py), its conftest.py and __init__.py; what
  tests share (helpers, fakes, stand-ins) lives in tests/support/, which holds no test module;
- no module of tests/ or benchmarks/ imports a test module or a layer's conftest: only
  tests.support, and the root conftest, whose hooks tests/mocked/test_require_engine.py tests;
- no file, test class or test function is named after an issue number: a name says what is
  tested;
- under `-n N`, each file of tests/engine/ and tests/kube/ runs on one worker, chosen by its
  directory (tests/conftest.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests import conftest
from tests.support.python_imports import ROOT, imported_from, module_name, parse

LAYERS = ("mocked", "loopback", "ssh", "engine", "kube")
#: Besides the layers' directories and support/.
TOP_FILES = ("__init__.py", "conftest.py")
#: Besides its test modules.
LAYER_FILES = ("__init__.py", "conftest.py")
#: `issue_33`, `Issue12`, `test_renewal_i5_window`, in any case.
ISSUE_NUMBER = re.compile(r"issue_?\d+|(?:^|_)i\d+_", re.IGNORECASE)


def entries(folder: Path) -> list[Path]:
    """What `ls` shows of a folder: no `__pycache__`, nothing hidden."""
    return sorted(p for p in folder.iterdir() if p.name != "__pycache__" and p.name[0] != ".")


def walk(folder: Path) -> Iterator[Path]:
    """Every file below `folder`, as `entries` shows them."""
    for path in entries(folder):
        if path.is_dir():
            yield from walk(path)
        else:
            yield path


def is_test_module(path: Path) -> bool:
    return path.is_file() and path.name.startswith("test_") and path.suffix == ".py"


def misplaced(root: Path = ROOT) -> list[str]:
    """What breaks the first two rules, one line each; [] when the layout holds."""
    tests = root / "tests"
    names = {p.name for p in entries(tests)}
    found = [
        f"tests/{name}: neither a layer, support/ nor {' or '.join(TOP_FILES)}"
        for name in sorted(names - {*LAYERS, "support", *TOP_FILES})
    ]
    found += [f"tests/{name}: missing" for name in sorted(set(LAYERS) - names)]
    for layer in sorted(set(LAYERS) & names):
        found += [
            f"{path.relative_to(root)}: not a test module (move it to support/)"
            for path in entries(tests / layer)
            if not is_test_module(path) and path.name not in LAYER_FILES
        ]
    found += [
        f"{path.relative_to(root)}: a test module outside the layers"
        for path in walk(tests)
        if is_test_module(path) and not (path.parent.parent == tests and path.parent.name in LAYERS)
    ]
    return found


def is_layered(name: str) -> bool:
    """Whether the module `name` is a layer's package, one of its test modules or its conftest."""
    return any(name == f"tests.{layer}" or name.startswith(f"tests.{layer}.") for layer in LAYERS)


def imported_test_modules(path: Path, root: Path = ROOT) -> list[str]:
    """The test modules and layer conftests `path` imports (a lazy import counts): of
    `from A import b`, A when it is one, else A.b (`from tests import mocked`)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if is_layered(alias.name)}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            names = [base] if is_layered(base) else [f"{base}.{a.name}" for a in node.names]
            found |= {n for n in names if is_layered(n)}
    return sorted(found)


def importers_of_test_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Each module of tests/ or benchmarks/ that imports a test module -> what it imports."""
    found: dict[str, list[str]] = {}
    for folder in ("tests", "benchmarks"):
        for path in walk(root / folder):
            if path.suffix == ".py" and (names := imported_test_modules(path, root)):
                found[str(path.relative_to(root))] = names
    return found


def defined_tests(tree: ast.Module) -> Iterator[str]:
    """The names of the test classes and test functions (methods too) a module defines."""
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test")
        ) or (isinstance(node, ast.ClassDef) and node.name.startswith("Test")):
            yield node.name


def issue_names(root: Path = ROOT) -> list[str]:
    """Every file or folder of tests/ and benchmarks/, and every test class and function of a
    test module, whose name carries an issue number."""
    found: set[str] = set()
    for folder in ("tests", "benchmarks"):
        for path in walk(root / folder):
            parts = path.relative_to(root).parts
            found |= {
                "/".join(parts[: i + 1])
                for i, part in enumerate(parts)
                if ISSUE_NUMBER.search(part)
            }
            if is_test_module(path) and folder == "tests":
                found |= {
                    f"{path.relative_to(root)}::{name}"
                    for name in defined_tests(parse(path))
                    if ISSUE_NUMBER.search(name)
                }
    return sorted(found)


def test_ls_tests_shows_the_layers_and_support_holds_no_test() -> None:
    assert misplaced() == []


def test_no_module_imports_a_test_module() -> None:
    found = importers_of_test_modules()
    assert not found, (
        f"imports of test modules: {found}. What several files use belongs in a module of "
        "tests/support/ named for what it is; a fixture, there or in the layer's conftest.py."
    )


def test_no_file_or_test_is_named_after_an_issue() -> None:
    found = issue_names()
    assert not found, f"named after an issue: {found}. Name it for what it tests."


class DistConfig:
    """What tests/conftest.py's scheduler hook reads of pytest's config under `-n 2`."""

    def getvalue(self, name: str) -> Any:
        return {"dist": "load", "tx": ["2*popen"]}[name]


def test_each_file_of_the_engine_and_kube_layers_runs_on_one_worker() -> None:
    """The scheduler's unit of work: the file, for a test of tests/engine/ or tests/kube/ (one
    stack's steps in order, one control plane); the test itself, for every other layer."""
    scheduler = conftest.pytest_xdist_make_scheduler(cast(pytest.Config, DistConfig()), None)
    layers = {path.parent.name for path in walk(ROOT / "tests") if is_test_module(path)}
    assert {"engine", "kube"} < layers
    for path in walk(ROOT / "tests"):
        if is_test_module(path):
            file = path.relative_to(ROOT).as_posix()
            one_worker = path.parent.name in ("engine", "kube")
            unit = scheduler._split_scope(f"{file}::test_x[1]")
            assert unit == (file if one_worker else f"{file}::test_x[1]"), file


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """On a planted tree: a layout that keeps the rules passes, and each way of breaking one is
    found, a lazy, a relative and a package-level import of a test module among them."""
    write(
        tmp_path,
        {
            "tests/__init__.py": "",
            "tests/conftest.py": "",
            **{f"tests/{layer}/__init__.py": "" for layer in LAYERS},
            "tests/loopback/conftest.py": "from tests.support.shared import Bucket\n",
            "tests/support/__init__.py": "",
            "tests/support/shared.py": "class Bucket: ...\n",
            "tests/support/fixtures/data.json": "{}",
            "tests/mocked/test_a.py": (
                "from tests import conftest\nfrom tests.support import shared\n"
                "from ..support.shared import Bucket\n"
                "def test_v5e1_iam_int8_weights() -> None: ...\n"
            ),
            "tests/ssh/test_c.py": "class TestRenewal:\n    def test_window(self) -> None: ...\n",
            "benchmarks/bench.py": "from tests.support.shared import Bucket\n",
        },
    )
    assert misplaced(tmp_path) == []
    assert importers_of_test_modules(tmp_path) == {}
    assert issue_names(tmp_path) == []

    write(
        tmp_path,
        {
            "tests/helpers.py": "",
            "tests/test_top.py": "",
            "tests/support/test_helper.py": "",
            "tests/mocked/shared_setup.py": "",
            "tests/mocked/test_b.py": (
                "from tests.loopback.test_x import props_for\n"
                "def f() -> None:\n    import tests.ssh.test_c\n"
                "from tests import mocked\nfrom ..loopback.conftest import bucket\n"
                "from .test_a import helper\n"
            ),
            "benchmarks/lab.py": "from tests.ssh.test_c import Lab\n",
            "tests/loopback/test_issue_33.py": "",
            "tests/ssh/test_d.py": (
                "def test_renewal_i5_window() -> None: ...\nasync def test_Issue12() -> None: ...\n"
                "class TestIssue7:\n    def test_issue_8_fix(self) -> None: ...\n"
            ),
            "tests/support/fixtures/issue9/data.json": "{}",
        },
    )
    (tmp_path / "tests/kube/__init__.py").unlink()
    (tmp_path / "tests/kube").rmdir()
    assert misplaced(tmp_path) == [
        "tests/helpers.py: neither a layer, support/ nor __init__.py or conftest.py",
        "tests/test_top.py: neither a layer, support/ nor __init__.py or conftest.py",
        "tests/kube: missing",
        "tests/mocked/shared_setup.py: not a test module (move it to support/)",
        "tests/support/test_helper.py: a test module outside the layers",
        "tests/test_top.py: a test module outside the layers",
    ]
    assert importers_of_test_modules(tmp_path) == {
        "benchmarks/lab.py": ["tests.ssh.test_c"],
        "tests/mocked/test_b.py": [
            "tests.loopback.conftest",
            "tests.loopback.test_x",
            "tests.mocked",
            "tests.mocked.test_a",
            "tests.ssh.test_c",
        ],
    }
    assert issue_names(tmp_path) == [
        "tests/loopback/test_issue_33.py",
        "tests/ssh/test_d.py::TestIssue7",
        "tests/ssh/test_d.py::test_Issue12",
        "tests/ssh/test_d.py::test_issue_8_fix",
        "tests/ssh/test_d.py::test_renewal_i5_window",
        "tests/support/fixtures/issue9",
    ]
