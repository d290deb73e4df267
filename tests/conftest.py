"""Shared test setup: the network guard, and the loopback fakes as fixtures.

Nothing in the suite may reach a real Google API or any address outside loopback. The guard
below turns any such connection attempt into an immediate test failure, so a fake that is not
wired up shows as an error instead of a silent call to the internet.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = [
    "tests.support.fakes.tpu_api",
    "tests.support.fakes.secret_manager",
    "tests.support.fakes.metadata_server",
    "tests.support.fakes.ssh_host",
    "tests.support.fakes.fake_pulumi",
    "tests.support.fakes.hf_hub",
    "tests.support.fakes.openai_server",
    "tests.support.fakes.resource_manager",
]


class NetworkAccessError(AssertionError):
    """A test tried to reach an address outside loopback."""


def _is_loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX paths
        return True
    host = address[0]
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any connection to a non-loopback address, and any DNS lookup of a real host."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def guard(address: Any) -> None:
        if not _is_loopback(address):
            raise NetworkAccessError(f"test tried to reach {address!r} outside loopback")

    def connect(self: socket.socket, address: Any) -> None:
        guard(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        guard(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "localhost") and not _is_loopback((host, 0)):
            raise NetworkAccessError(f"test tried to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield


#: The engine layer: each file one stack's steps, in order (tests/support/engine_stack.py); and the
#: Kubernetes layer, each of whose files shares one control plane (tests/support/kube_cluster.py).
ENGINE_DIR = "tests/engine/"
ONE_WORKER_DIRS = (ENGINE_DIR, "tests/kube/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `-n N` (`--dist load`): the tests of each file in tests/engine/ and tests/kube/ to one
    worker, in order, every other test on its own, so no long file holds a worker while the rest
    wait. Long files go first (pytest-xdist's `loadscope` orders work by size). pytest-xdist's own
    `loadgroup` would do this by mark, but under pytest 9.2 its suffix on `item._nodeid` no longer
    changes the id."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class StackScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.startswith(ONE_WORKER_DIRS) else nodeid

    return StackScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Two summaries at the end of every run: which engine tools ran, then the skipped tests,
    by reason (last: only pytest's own short summary and counts follow)."""
    _engine_tools_summary(terminalreporter)
    _skip_summary(terminalreporter)


def _engine_tools_summary(terminalreporter: Any) -> None:
    """Which language host and pulumi-command the engine tests ran: a real one or the suite's
    stand-in (tests/support/engine_cli.py). Printed whenever a test of tests/engine/ ran, also
    under -q."""
    reports = [r for reports in terminalreporter.stats.values() for r in reports]
    if not any(str(getattr(r, "nodeid", "")).startswith(ENGINE_DIR) for r in reports):
        return
    from tests.support import engine, engine_cli

    found = engine._find()
    if isinstance(found, str):
        return
    terminalreporter.section("engine tools")
    for pick in engine_cli.chosen().values():
        terminalreporter.write_line(pick.describe())


SKIPPED_PREFIX = "Skipped: "


def skip_reason(report: Any) -> str:
    """A skipped test's reason, as `pytest.skip(reason)` or a skip mark gave it. A skip's longrepr
    is `(path, line, "Skipped: reason")`; through pytest-xdist it may arrive as a list."""
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix(SKIPPED_PREFIX)


def _skip_summary(terminalreporter: Any) -> None:
    """The skipped tests grouped by reason, a count for each, most first, so a skipped layer (the
    engine, the Kubernetes control plane) is never silent, also under -q. One line when nothing
    skipped. Under pytest-xdist the workers' reports reach this, the controller's, reporter."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not hasattr(r, "wasxfail")]
    if not skipped:
        terminalreporter.write_line("skipped tests: none")
        return
    counts: dict[str, int] = {}
    for report in skipped:
        reason = skip_reason(report)
        counts[reason] = counts.get(reason, 0) + 1
    terminalreporter.section(f"skipped tests by reason: {len(skipped)} skipped")
    for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{count:4d} x {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Under TPU_VLLM_REQUIRE_ENGINE=1 (.ci/run) an engine test that skips fails instead, with
    its reason: a layer that skips in CI drifts unseen (docs/testing.md, "The engine layer")."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    # The Kubernetes layer (tests/support/kube_cluster.py) follows the same rule under its own
    # variable.
    for marker, variable in (
        ("engine", "TPU_VLLM_REQUIRE_ENGINE"),
        ("kube", "TPU_VLLM_REQUIRE_KUBE"),
    ):
        if os.environ.get(variable, "") == "1" and item.get_closest_marker(marker) is not None:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            report.outcome = "failed"
            report.longrepr = f"{marker} test skipped under {variable}=1 (set by .ci/run): {reason}"
            return
