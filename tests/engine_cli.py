"""The engine tools a stack's `pulumi up` needs, from tests/engine.py's build, with the stand-ins.

tests/engine.py finds what scripts/engine/build.sh built and gives the offline environment.
A whole stack needs more of the build than its own tests do: the Python language host (the
program runs from `Pulumi.yaml`'s virtualenv, not through the Automation API) and
pulumi-command (the remote commands). While build.sh records one as not built (the Go module
proxy here refuses both), the stack's tests skip, quoting that record. The gcp, random and tls
provider plugins are the stand-ins in tests/standins/bin, on PATH after the tools.
"""

from __future__ import annotations

from pathlib import Path

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
    """The build, with every tool a stack needs; else a skip that quotes build.sh's record of
    the missing one (as tests/engine.py does for a tool the Go module proxy refused)."""
    found = engine.tools()
    found.require(*STACK_TOOLS)
    return found


def pulumi() -> str:
    return str(tools().bin_dir / "pulumi")


def environment(tmp: Path) -> dict[str, str]:
    """tests/engine.py's offline environment, with the stand-in plugins on PATH."""
    return engine.environment(tools(), tmp, path=[STANDINS_BIN])
