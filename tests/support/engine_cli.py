"""The engine tools a stack's `pulumi up` needs: the build's, a real one found, or a stand-in.

tests/support/engine.py finds what scripts/engine/build.sh built and gives the offline environment.
A whole stack needs two tools more than the build can make here: the Python language host (the
program runs from `Pulumi.yaml`'s virtualenv, not through the Automation API) and
pulumi-command (the remote commands). The Go module proxy refuses both, so for each one:

1. the build's own, when build.sh records it as built (a proxy that serves it);
2. else a real one on the caller's PATH (a user's Pulumi installation: `~/.pulumi/bin` has the
   language host; `pulumi plugin install resource command` puts the provider in the plugin
   cache, which the engine reads only when no ambient one is found, so link it onto PATH);
3. else the suite's stand-in (tests/support/standins/bin: `language_host.py`,
   `command_provider.py`).

A real tool always wins; `chosen()` says which one runs, and the test summary prints it
(tests/conftest.py). The gcp, random and tls provider plugins are always the stand-ins.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support import engine

ROOT = Path(__file__).resolve().parents[2]
STANDINS_BIN = ROOT / "tests" / "support" / "standins" / "bin"
#: What the build must have made for any program to run through the CLI.
BUILT_TOOLS = ("pulumi", "pulumi-language-python-exec", "pulumi-resource-pulumi-python")
#: The tools the Go module proxy refuses, each with the stand-in that takes its place.
REFUSED = {
    "pulumi-language-python": "tests/support/standins/language_host.py",
    "pulumi-resource-command": "tests/support/standins/command_provider.py",
}
PASSPHRASE = engine.PASSPHRASE


@dataclass(frozen=True)
class Chosen:
    """One of the refused tools: the executable that runs, and where it came from."""

    tool: str
    path: Path
    #: "built", "PATH" or "stand-in".
    source: str

    def describe(self) -> str:
        if self.source == "built":
            return f"{self.tool}: real, built by scripts/engine/build.sh ({self.path})"
        if self.source == "PATH":
            return f"{self.tool}: real, found on PATH ({self.path})"
        return (
            f"{self.tool}: stand-in {REFUSED[self.tool]} "
            "(no real one built or on PATH; the Go module proxy refuses it)"
        )


def _on_path(tool: str, path: str) -> Path | None:
    """`tool` on `path` (a PATH value), not counting the stand-ins' own directory."""
    dirs = [d for d in path.split(os.pathsep) if d and Path(d).resolve() != STANDINS_BIN.resolve()]
    found = shutil.which(tool, path=os.pathsep.join(dirs))
    return Path(found) if found else None


def choose(tools: engine.Tools, path: str) -> dict[str, Chosen]:
    """For each refused tool, the one to run: the build's, else one on `path`, else the
    stand-in. A real tool always wins."""
    picks: dict[str, Chosen] = {}
    for tool in REFUSED:
        if tools.status.get(tool, ("", ""))[1] == "built":
            picks[tool] = Chosen(tool, tools.bin_dir / tool, "built")
        elif (found := _on_path(tool, path)) is not None:
            picks[tool] = Chosen(tool, found, "PATH")
        else:
            picks[tool] = Chosen(tool, STANDINS_BIN / tool, "stand-in")
    return picks


@functools.cache
def chosen() -> dict[str, Chosen]:
    """The tools this session's engine tests run (the caller's PATH, read once)."""
    return choose(engine.tools(), os.environ.get("PATH", ""))


def tools() -> engine.Tools:
    """The build, with every tool a stack needs (tests/support/engine.py's skip, or failure under
    TPU_VLLM_REQUIRE_ENGINE, when it is missing)."""
    found = engine.tools()
    found.require(*BUILT_TOOLS)
    return found


def pulumi() -> str:
    return str(tools().bin_dir / "pulumi")


def environment(tmp: Path, picks: Mapping[str, Chosen] | None = None) -> dict[str, str]:
    """tests/support/engine.py's offline environment: the built tools first, then the real tools
    found on the caller's PATH (linked one by one, so nothing else of that directory, such as a real
    gcp provider, is ever found), then the stand-ins."""
    real_dir = tmp / "real-tools"
    real_dir.mkdir(exist_ok=True)
    for pick in (picks if picks is not None else chosen()).values():
        if pick.source == "PATH":
            link = real_dir / pick.tool
            if not link.exists():
                link.symlink_to(pick.path.resolve())
    return engine.environment(tools(), tmp, path=[real_dir, STANDINS_BIN])
