"""The engine layer: the Pulumi CLI built from the Go module proxy, run for real and offline.

What runs here is the real CLI (`scripts/engine/build.sh`), its file backend, its passphrase
secrets provider and the dynamic provider host `pulumi-resource-pulumi-python`; the program goes
through the Automation API because the proxy refuses the Python language host
(tests/support/engine.py). The README's own commands (`pulumi stack output`, `pulumi destroy --yes`)
run through the CLI directly. Every run gets the offline environment of tests/support/engine.py; the
offline proof runs it again in a network namespace that has only `lo`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from scripts import pulumi_cli
from tests.support import engine, engine_cli
from tests.support.engine_inline_program import ABSENT_TYPE, ABSENT_VERSION, SECRET_SENTINEL, STACK
from tests.support.pulumi_program import ROOT

pytestmark = pytest.mark.engine

PROGRAM = Path(__file__).parents[1] / "support" / "engine_inline_program.py"


def _pinned(pattern: str, text: str) -> str:
    found = re.search(pattern, text, re.MULTILINE)
    assert found, pattern
    return found.group(1)


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


def test_the_built_cli_reports_the_pinned_version_not_older_than_the_python_sdk(
    tmp_path: Path,
) -> None:
    tools = engine.tools()
    build = (ROOT / "scripts" / "engine" / "build.sh").read_text()
    pinned = _pinned(r"^\s*PULUMI_VERSION=(v\S+)$", build)
    wrapper = (ROOT / "scripts" / "engine" / "cli" / "go.mod").read_text()
    # One version for the CLI, the sdk/v3 it is built with, and the language host's scripts.
    assert _pinned(r"github\.com/pulumi/pulumi/pkg/v3 (v\S+)", wrapper) == pinned
    assert _pinned(r"github\.com/pulumi/pulumi/sdk/v3 (v\S+)", wrapper) == pinned
    for tool in ("pulumi", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"):
        assert tools.status[tool] == (pinned, "built"), tool

    env = engine.environment(tools, tmp_path)
    done = engine.run([str(tools.bin_dir / "pulumi"), "version"], env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == pinned  # the -X version flag, not "v3.0.0-dev"
    sdk = _pinned(r"^pulumi==(\S+)$", (ROOT / "requirements.txt").read_text())
    assert _semver(pinned) >= _semver(sdk)


def test_every_tool_a_stack_needs_is_there_real_or_stand_in() -> None:
    """The README's `pulumi up` needs the language host, and the program's remote commands
    pulumi-command: the real ones where built or on PATH, else the suite's stand-ins; never a
    skip for want of them. Whatever build.sh recorded of the proxy's refusal stays recorded."""
    tools = engine_cli.tools()
    for tool, pick in engine_cli.chosen().items():
        assert os.access(pick.path, os.X_OK), pick.describe()
        if tools.status.get(tool, ("", ""))[1] == "built":
            assert pick.source == "built", pick.describe()  # a real tool always wins
        else:
            assert pick.source in ("PATH", "stand-in"), pick.describe()


def _up_output_destroy(tmp_path: Path, *, offline: bool) -> None:
    """`pulumi up` of the inline program, then the README's `stack output` and `destroy`."""
    tools = engine.tools()
    env = engine.environment(tools, tmp_path)
    wrap = engine.offline if offline else list
    work, target = tmp_path / "project", tmp_path / "made-by-the-engine.txt"
    work.mkdir()
    pulumi = str(tools.bin_dir / "pulumi")

    up = engine.run(wrap([engine.PYTHON, str(PROGRAM), str(work), str(target)]), env, cwd=work)
    assert up.returncode == 0, up.stdout + up.stderr
    assert target.read_text() == "made by the engine\n"  # the dynamic provider's create ran
    assert "+ 2 created" in up.stdout  # the stack and the dynamic resource, nothing more

    shown = engine.run(wrap([pulumi, "stack", "output", "--json", "-s", STACK]), env, cwd=work)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"path": str(target), "secret": "[secret]"}
    # The file backend keeps the secret encrypted with the passphrase, never in plain text.
    state_files = list((tmp_path / "state").rglob("*.json"))
    assert state_files
    assert not [f for f in state_files if SECRET_SENTINEL in f.read_text()]

    gone = engine.run(wrap([pulumi, "destroy", "--yes", "-s", STACK]), env, cwd=work)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not target.exists()  # the dynamic provider's delete ran
    after = engine.run(wrap([pulumi, "stack", "output", "--json", "-s", STACK]), env, cwd=work)
    assert json.loads(after.stdout) == {}
    for done in (up, shown, gone, after):
        assert engine.PASSPHRASE not in done.stdout + done.stderr


def test_up_and_destroy_through_the_real_engine_with_a_dynamic_provider(tmp_path: Path) -> None:
    _up_output_destroy(tmp_path, offline=False)


def test_the_same_run_works_with_no_network_but_loopback(tmp_path: Path) -> None:
    engine.tools()
    engine.require_offline()
    # Inside the namespace: loopback is the only link, and no route leads anywhere else. A
    # route lookup sends nothing, so this proves it without trying to reach an outside address.
    links = subprocess.run(
        engine.offline(["ip", "-o", "link", "show"]), capture_output=True, text=True, check=True
    )
    assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]
    route = subprocess.run(
        engine.offline(["ip", "route", "get", "192.0.2.1"]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert route.returncode != 0 and "Network is unreachable" in route.stderr
    _up_output_destroy(tmp_path, offline=True)


def test_a_missing_plugin_is_named_never_downloaded(tmp_path: Path) -> None:
    """PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: without it the engine would fetch the
    plugin from get.pulumi.com; with it, the error names the plugin and where it looked."""
    tools = engine.tools()
    engine.require_offline()
    env = engine.environment(tools, tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    argv = [engine.PYTHON, str(PROGRAM), str(work), str(tmp_path / "f"), "--absent-plugin"]
    up = engine.run(engine.offline(argv), env, cwd=work)
    out = up.stdout + up.stderr
    assert up.returncode == 1, out
    plugin = ABSENT_TYPE.split(":")[0]
    assert (
        f"no resource plugin 'pulumi-resource-{plugin}' found in the workspace at version "
        f"v{ABSENT_VERSION} or on your $PATH"
    ) in out
    assert "get.pulumi.com" not in out and "downloading" not in out


def test_operator_scripts_give_the_cli_an_environment_without_its_update_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/pulumi_cli.environment() (smoke_test, renew): the real CLI logs that it skips
    the check (pkg/cmd/pulumi/pulumi.go reads PULUMI_SKIP_UPDATE_CHECK). Offline only: a wrong
    variable name would otherwise let the CLI call api.pulumi.com from the test."""
    tools = engine.tools()
    engine.require_offline()
    for name in ("PULUMI_SKIP_UPDATE_CHECK", "PULUMI_SKIP_UPDATE_CHECKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path))
    argv = [str(tools.bin_dir / "pulumi"), "--logtostderr", "-v=3", "version"]
    done = subprocess.run(
        engine.offline(argv),
        env=pulumi_cli.environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "skipping update check" in done.stderr


def test_a_real_tool_on_path_wins_over_the_stand_in_and_comes_alone(tmp_path: Path) -> None:
    """A user's Pulumi installation on PATH: its language host runs, linked into the run's PATH
    by itself (its directory's other plugins, say a real gcp provider, are never found), before
    the stand-ins; pulumi-command, found nowhere, stays the stand-in."""
    built = engine_cli.tools()
    refused = {tool: ("?", "refused: 403") for tool in engine_cli.REFUSED}
    tools = engine.Tools(built.bin_dir, {**built.status, **refused})
    installed = tmp_path / "pulumi-install"
    installed.mkdir()
    for name in ("pulumi-language-python", "pulumi-resource-gcp"):
        (installed / name).write_text("#!/bin/sh\nexit 0\n")
        (installed / name).chmod(0o755)
    path = os.pathsep.join([str(engine_cli.STANDINS_BIN), str(installed), "/usr/bin"])
    picks = engine_cli.choose(tools, path)
    language = picks["pulumi-language-python"]
    assert (language.source, language.path) == ("PATH", installed / "pulumi-language-python")
    assert "real, found on PATH" in language.describe()
    assert picks["pulumi-resource-command"].source == "stand-in"
    env = engine_cli.environment(tmp_path, picks)
    dirs = env["PATH"].split(os.pathsep)
    linked = tmp_path / "real-tools"
    assert dirs.index(str(linked)) < dirs.index(str(engine_cli.STANDINS_BIN))
    assert str(installed) not in dirs
    assert sorted(p.name for p in linked.iterdir()) == ["pulumi-language-python"]
    assert (linked / "pulumi-language-python").resolve() == installed / "pulumi-language-python"
    # And a build that has one always wins over PATH.
    both = engine.Tools(built.bin_dir, {**refused, "pulumi-language-python": ("v3", "built")})
    assert engine_cli.choose(both, path)["pulumi-language-python"].source == "built"
