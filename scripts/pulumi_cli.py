"""The pulumi CLI as the operator scripts use it: only the CLI knows the user's backend and login.

Run with stdin closed, so a passphrase prompt fails with pulumi's own message instead of
hanging a cron job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INSTALL_URL = "https://www.pulumi.com/docs/install/"
DEFAULT_TIMEOUT_SECONDS = 120.0


class PulumiCliError(Exception):
    """The message says which: missing, failed, or printed something unexpected."""


def executable() -> str:
    found = shutil.which("pulumi")
    if found is None:
        raise PulumiCliError(f"the pulumi CLI is not on PATH: install it ({INSTALL_URL})")
    return found


def environment() -> dict[str, str]:
    """Without the CLI's update check (sdk/go/common/env/env.go `SkipUpdateCheck`): no network
    call, no nag."""
    return {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}


def error_reason(stderr: str, status: int) -> str:
    """The CLI's own error line (`error: ...`), else its last line, else the exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or [f"exit status {status}"])[-1]


def stack_outputs(
    stack: str, *, show_secrets: bool = False, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """Its stdout is never echoed in an error: with `show_secrets` it holds the secrets."""
    args = ["stack", "output", "--json", *(["--show-secrets"] if show_secrets else []), "-s", stack]
    shown = f"`pulumi stack output --json -s {stack}`"
    try:
        done = subprocess.run(
            [executable(), *args],
            cwd=PROJECT_ROOT,
            env=environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PulumiCliError(f"{shown} did not finish in {timeout:.0f} s") from None
    except OSError as error:
        raise PulumiCliError(f"cannot run pulumi: {' '.join(str(error).split())}") from None
    if done.returncode != 0:
        raise PulumiCliError(
            f"{shown} failed (exit status {done.returncode}): "
            f"{error_reason(done.stderr, done.returncode)}"
        )
    try:
        outputs = json.loads(done.stdout or "{}")
    except ValueError:
        raise PulumiCliError(f"{shown} did not print JSON") from None
    if not isinstance(outputs, dict):
        raise PulumiCliError(f"{shown} did not print a JSON object")
    return outputs
