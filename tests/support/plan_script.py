"""`scripts/plan.py` as a user runs it, for the tests of the plan and of its summary."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.pulumi_program import ROOT


def run_plan_script(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m scripts.plan ARGS` in a fresh process, with no `GOOGLE_*` or `PULUMI_*`
    variable of the caller: the plan needs no credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "PULUMI_"))}
    return subprocess.run(
        [sys.executable, "-m", "scripts.plan", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
