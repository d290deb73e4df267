"""The real Pulumi engine for tests: the tools `scripts/engine/build.sh` built, run offline.

`scripts/test.sh` (and so `.ci/run`) runs the build before pytest; this module only reads where
the tools are (`build.sh --print-bin`) and which ones the build made or the Go module proxy
refused (`tools.tsv` beside the bin dir). The tests never build: a cold build takes minutes, and
inside a test it would look like a hang.

A test that needs the engine calls `tools()` (or a tool with `Tools.require`). When the tools are
not there it skips, saying how to build them; with TPU_VLLM_REQUIRE_ENGINE=1 (exported by
.ci/run) that is a failure instead, so CI cannot pass without the engine layer having run. The
two tools the proxy refuses (the Python language host, pulumi-command) are never a reason to
skip: tests/support/engine_cli.py runs a real one when there is one, else the suite's stand-in.

`environment()` is the one offline environment every engine run gets (docs/testing.md, "The
engine layer"): a file backend and PULUMI_HOME in the test's temporary directory, a passphrase,
no update check (`PULUMI_SKIP_UPDATE_CHECK`, pulumi/pulumi sdk/go/common/env/env.go), no plugin
download (`PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION`, same file), plugins found on PATH
(sdk/go/common/workspace/plugins.go, `getPluginInfoAndPath`: `exec.LookPath` of
`pulumi-resource-NAME` before the plugin cache), and none of the caller's Pulumi or Google
settings or credentials. `offline()` wraps an argv in a new network namespace that has only `lo`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.privileged import skip_or_fail
from tests.support.pulumi_program import ROOT

BUILD_SCRIPT = ROOT / "scripts" / "engine" / "build.sh"
#: Exported by .ci/run: the engine layer must run, a missing build is a failure.
REQUIRE_ENV = "TPU_VLLM_REQUIRE_ENGINE"
#: The passphrase of every test stack's secrets; tests check it never shows in output.
PASSPHRASE = "engine-test-passphrase-sentinel"
#: The programs' interpreter: this one, which has every dependency of the project.
PYTHON = sys.executable
# Caller settings that must not reach the engine: another backend, token or plugin setup, and
# any Google credentials or project (the tests reach no Google API, real or fake, through them).
_DROPPED_PREFIXES = ("PULUMI_", "GOOGLE_", "CLOUDSDK_", "GCE_", "ARM_", "AWS_")


@dataclass(frozen=True)
class Tools:
    """The bin dir of one build, and each tool's version and status from its tools.tsv."""

    bin_dir: Path
    status: Mapping[str, tuple[str, str]]

    def version(self, tool: str) -> str:
        return self.status[tool][0]

    def require(self, *names: str) -> None:
        """Skip, quoting build.sh's record, unless every named tool was built."""
        for name in names:
            version, state = self.status.get(name, ("?", "not in tools.tsv"))
            if state != "built":
                pytest.skip(f"{name} {version} is not built: {state}")


#: How to get the engine tools.
BUILD_FIX = "scripts/engine/build.sh (needs Go 1.26.7 or later; scripts/test.sh runs it)"


def _missing(reason: str) -> Tools:
    if os.environ.get(REQUIRE_ENV, "") == "1":
        pytest.fail(
            f"{reason}, but {REQUIRE_ENV}=1 (set by .ci/run) requires the engine layer. "
            f"Fix: {BUILD_FIX}",
            pytrace=False,
        )
    pytest.skip(f"{reason}. Fix: {BUILD_FIX}")


@functools.cache
def _find() -> Tools | str:
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        return f"the engine is not built ({done.stderr.strip()})"
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    status: dict[str, tuple[str, str]] = {}
    for line in (bin_dir.parent / "tools.tsv").read_text().splitlines():
        name, version, state = line.split("\t", 2)
        status[name] = (version, state)
    return Tools(bin_dir=bin_dir, status=status)


def tools() -> Tools:
    """The built engine, or a skip (a failure under REQUIRE_ENV) that says how to build it."""
    found = _find()
    if isinstance(found, str):
        return _missing(found)
    return found


def environment(engine: Tools, tmp: Path, *, path: Sequence[Path] = ()) -> dict[str, str]:
    """The offline environment of one engine run, with its state and home under `tmp`.

    PATH: the built tools, then `path` (e.g. stand-in provider plugins), then this interpreter's
    bin dir (its `python3` runs the programs and dynamic providers), then the system's."""
    state = tmp / "state"
    home = tmp / "home"
    state.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    kept = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    dirs = [engine.bin_dir, *path, Path(PYTHON).parent, Path("/usr/local/bin"), Path("/usr/bin")]
    return {
        **kept,
        "PATH": os.pathsep.join([*(str(d) for d in dirs), "/usr/sbin", "/bin"]),
        # No user config is read: not ~/.pulumi, and not ~/.config/gcloud's credentials.
        "HOME": str(home),
        "PULUMI_HOME": str(home / ".pulumi"),
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # The Python the language host and pulumi-resource-pulumi-python start.
        "PULUMI_PYTHON_CMD": PYTHON,
    }


def offline(argv: Sequence[str]) -> list[str]:
    """`argv` in a new network namespace: only loopback, brought up first (`unshare -n`)."""
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


@functools.cache
def _offline_refusal() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare (util-linux) or ip (iproute2) is not installed"
    done = subprocess.run(offline(["true"]), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`unshare --net` is not permitted here ({done.stderr.strip()})"
    return None


def require_offline() -> None:
    """Skip (fail in CI, tests/support/privileged.py) unless a new network namespace can be made."""
    refusal = _offline_refusal()
    if refusal is not None:
        skip_or_fail(refusal)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run one engine command; the output is returned for the test to assert on."""
    return subprocess.run(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
