"""The engine tools a stack's `pulumi up` needs, from tests/engine.py's build, with the stand-ins.

tests/engine.py finds what scripts/engine/build.sh built and gives the offline environment.
A whole stack needs more of the build than its own tests do: the Python language host (the
program runs from `Pulumi.yaml`'s virtualenv, not through the Automation API) and
pulumi-command (the remote commands). A test that needs them skips, quoting build.sh's record
of the tool, while one is missing; CI (TPU_VLLM_REQUIRE_ENGINE=1) fails instead. The gcp, random
and tls provider plugins are the stand-ins in tests/standins/bin, first on PATH after the tools.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import engine

ROOT = Path(__file__).resolve().parent.parent
STANDINS_BIN = ROOT / "tests" / "standins" / "bin"
#: Everything `pulumi up` of the program starts, besides the stand-in plugins.
STACK_TOOLS = (
    "pulumi",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-pulumi-python",
    "pulumi-resource-command",
)
PASSPHRASE = engine.PASSPHRASE


def tools() -> engine.Tools:
    """The build, with every tool a stack needs; else a skip (a failure in CI) naming it."""
    found = engine.tools()
    missing = [t for t in STACK_TOOLS if found.status.get(t, ("", ""))[1] != "built"]
    if missing:
        name = missing[0]
        version, state = found.status.get(name, ("?", "not in tools.tsv"))
        reason = f"{name} {version} is not built ({state})"
        if os.environ.get(engine.REQUIRE_ENV, "") == "1":
            pytest.fail(f"{reason}, but {engine.REQUIRE_ENV}=1 requires it", pytrace=False)
        pytest.skip(reason)
    return found


def pulumi() -> str:
    return str(tools().bin_dir / "pulumi")


def environment(tmp: Path) -> dict[str, str]:
    """tests/engine.py's offline environment, with the stand-in plugins on PATH."""
    return engine.environment(tools(), tmp, path=[STANDINS_BIN])
