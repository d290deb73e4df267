"""`scripts/test.sh` ends with the skipped tests grouped by reason, so a layer
that skipped (the engine, the Kubernetes control plane) is never silent.

The summary is tests/conftest.py's `pytest_terminal_summary`. To see it print, a pytest of its
own runs in a subprocess on a tiny test file in a temporary directory, with tests/conftest.py
loaded as a plugin (`-p tests.conftest`, importable because `python -m pytest` runs from the
project root, which puts that directory on sys.path). `-c /dev/null` and `--rootdir` keep the
project's pytest settings (testpaths, addopts) out of it, and the temporary directory has no
conftest.py of its own, so the hook is loaded exactly once. It runs serially and under
pytest-xdist, where the workers' skipped reports reach the controller's terminal reporter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pulumi_program import ROOT

TINY_TESTS = """
import pytest


@pytest.mark.skip(reason="layer A is not built")
def test_marked():
    pass


def test_skipped_in_the_body():
    pytest.skip("layer A is not built")


@pytest.fixture
def tool_b():
    pytest.skip("tool B is missing")


def test_skipped_by_a_fixture(tool_b):
    pass


def test_passes():
    pass


@pytest.mark.xfail(reason="an expected failure is not a skip")
def test_expected_failure():
    assert False
"""

NOTHING_SKIPPED = """
def test_passes():
    pass
"""


def _pytest(tmp_path: Path, source: str, workers: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tiny.py").write_text(source)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TPU_VLLM_REQUIRE_"))
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            "-q",
            "-n",
            workers,
            str(tmp_path / "test_tiny.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("workers", ["0", "2"])
def test_skips_are_counted_by_reason_at_the_end_of_the_run(tmp_path: Path, workers: str) -> None:
    result = _pytest(tmp_path, TINY_TESTS, workers)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.rstrip("\n").splitlines()
    heading = next(i for i, line in enumerate(lines) if "skipped tests by reason" in line)
    assert "3 skipped" in lines[heading]
    assert lines[heading + 1 : heading + 3] == [
        "   2 x layer A is not built",
        "   1 x tool B is missing",
    ]
    # Last: only pytest's own count line follows.
    assert lines[heading + 3 :] == [lines[-1]]
    assert "1 passed, 3 skipped, 1 xfailed" in lines[-1]
    assert "Skipped: " not in result.stdout
    assert "an expected failure" not in result.stdout


def test_a_run_without_skips_says_so_in_one_line(tmp_path: Path) -> None:
    result = _pytest(tmp_path, NOTHING_SKIPPED, "0")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.rstrip("\n").splitlines()
    assert lines[-2:] == ["skipped tests: none", lines[-1]]
    assert "1 passed" in lines[-1]
    assert "skipped tests by reason" not in result.stdout


def test_scripts_test_sh_runs_the_suite_with_that_summary() -> None:
    """test.sh runs pytest from the project root on the default test paths, so tests/conftest.py
    (and its summary) is loaded; nothing turns conftest files or the terminal summary off."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert 'cd "$(dirname "$0")/.."' in script
    last = [line for line in script.splitlines() if line.strip()][-1]
    assert last.startswith('exec "$VENV/bin/python" -m pytest ')
    for off in ("--noconftest", "-p no:terminal", "--confcutdir"):
        assert off not in script, off
