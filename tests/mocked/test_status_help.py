"""`scripts/status.py --help` says what its argument is and what each exit status means, as the
other scripts' help does. The statuses are read from the script's own code,
so a new one that the help leaves out fails here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.support.docs import ROOT

SCRIPT = ROOT / "scripts" / "status.py"
MODULE = "scripts.status"
#: argparse's own status for a usage error (a missing or unknown argument).
ARGPARSE_USAGE_ERROR = 2


def help_text() -> str:
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return " ".join(done.stdout.split())


def exit_statuses() -> set[int]:
    """Every status `status()` and `main()` return: int literals and the module's int
    constants they name, and argparse's usage error."""
    tree = ast.parse(SCRIPT.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, int)
    }
    found = {ARGPARSE_USAGE_ERROR}
    for function in tree.body:
        if not (isinstance(function, ast.FunctionDef) and function.name in {"status", "main"}):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                found.add(value.value)
            elif isinstance(value, ast.Name) and value.id in constants:
                found.add(int(constants[value.id]))
    return found


def described_statuses(text: str) -> dict[int, str]:
    """{status: its meaning} from the help's "Exit status: N meaning; M meaning." sentence."""
    match = re.search(r"Exit status: (.*)", text)
    assert match, "the help has no 'Exit status:' sentence"
    parts = re.split(r"(?:^|; )(\d+) ", match.group(1))[1:]
    return {
        int(code): meaning.strip() for code, meaning in zip(parts[::2], parts[1::2], strict=True)
    }


def test_the_help_names_the_argument_and_what_it_is() -> None:
    text = help_text()
    assert re.search(r"usage: python -m scripts\.status .* STACK\b", text), text
    described = re.search(r"positional arguments: STACK (.+?) options:", text)
    assert described, text
    assert "Pulumi stack" in described.group(1) and "e.g. v5e1" in described.group(1)


def test_the_help_describes_each_exit_status_the_code_returns() -> None:
    codes = exit_statuses()
    assert codes == {0, 2}, codes  # 0 shown, 2 no outputs (EXIT_NO_OUTPUTS) or a usage error
    described = described_statuses(help_text())
    assert set(described) == codes, described
    assert "shown" in described[0]
    assert "outputs could not be read" in described[2] and "arguments" in described[2]


def test_a_missing_argument_exits_with_the_usage_status() -> None:
    done = subprocess.run(
        [sys.executable, "-m", MODULE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == ARGPARSE_USAGE_ERROR
    assert "STACK" in done.stderr
