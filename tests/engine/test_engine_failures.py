"""What goes wrong, through the real Pulumi CLI: a refused config value, a server that fails
to start, and the `up` after the cause is fixed (tests/support/engine_stack.py).

One stack, in order: a chip pre-flight refuses (preview and up fail naming the key; nothing
is created anywhere); the chip put right; an enforced org policy (OS Login) that stops the run
before a TPU is requested; a server flag that makes vLLM run out of HBM (the
fake docker replays seed-shaped `crash_hbm_oom.log` for exactly that flag), so the readiness
check fails `pulumi up` with the log's reason; the flag put back, and the next `up` succeeds on
the same TPU from the state the failed one left.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from components.vm.org_policy import MANAGED_REQUIRE_OS_LOGIN
from tests.support.engine_stack import HF_TOKEN, PROJECT, Lifecycle, engine_stack
from tests.support.fakes.ssh_host import Scenario
from tests.support.standins.store import everything

pytestmark = pytest.mark.engine

STACK = "v5e1"
OOM_FLAG = ["--gpu-memory-utilization", "0.98"]
SCENARIO: Scenario = {
    "log": "v5e1_ready.log",
    "speed": 2000.0,
    "by_args": [(OOM_FLAG, {"log": "crash_hbm_oom.log", "speed": 2000.0})],
}


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    with engine_stack(tmp_path_factory.mktemp("engine-fail"), STACK, scenario=SCENARIO) as engine:
        yield Lifecycle(engine)


def refused(life: Lifecycle, key: str, texts: tuple[str, ...]) -> None:
    """`pulumi preview` and `pulumi up` both fail, naming `key` and the fix; nothing exists."""
    engine = life.engine
    for run in (engine.pulumi("preview"), engine.up()):
        assert run.returncode != 0, run.output
        assert key in run.output, run.output[-3000:]
        for text in texts:
            assert text in run.output, text
        assert "Fix" in run.output
        assert "Traceback" not in run.output
        assert HF_TOKEN not in run.output
    fakes = engine.fakes
    assert fakes.tpu.requests == [], "the TPU API was called"
    assert fakes.fleet.history == []
    assert fakes.resource_manager.requests == [] and fakes.resource_manager.v2_requests == []
    assert everything(fakes.standin_state) == {}
    kinds = {r["type"] for r in engine.resources()}
    assert kinds <= {"pulumi:pulumi:Stack"}, kinds


def test_a_refused_value_fails_the_preview_naming_the_key_and_creates_nothing(
    life: Lifecycle,
) -> None:
    with life.step("bad-input"):
        engine = life.engine
        # Without --path the CLI stores one key named `tpu.chip` that no section holds.
        engine.config_set("tpu-vllm:tpu.chip", "v6e-4")
        refused(life, "tpu-vllm:tpu.chip", ("never read", "--path"))
        engine.pulumi("config", "rm", "tpu-vllm:tpu.chip").check()
        # As the README sets a section's key: a value the pre-flight refuses.
        engine.config_set("tpu-vllm:tpu.chip", "v5e-3", "--path")
        refused(life, "tpu-vllm:tpu.chip", ("v5e-3", "unknown chip"))
        engine.config_set("tpu-vllm:tpu.chip", "v5e-1", "--path")


def test_an_enforced_org_policy_stops_the_run_before_any_tpu(life: Lifecycle) -> None:
    """The gate's check runs in the real dynamic provider host, unpickled from the program,
    with only RESOURCE_MANAGER_API_ENDPOINT set: the managed constraint's Org Policy v2 read
    follows it (components/vm/org_policy.py)."""
    with life.step("org-policy", after="bad-input"):
        engine = life.engine
        fakes = engine.fakes
        fakes.resource_manager.enforced = {MANAGED_REQUIRE_OS_LOGIN}
        try:
            for run in (engine.pulumi("preview"), engine.up()):
                assert run.returncode != 0, run.output
                assert f"constraint {MANAGED_REQUIRE_OS_LOGIN} is enforced" in run.output
                assert "Nothing was requested. Fix: ask your organization admin" in run.output
                # The dynamic provider host prints the traceback of any exception a provider
                # raises (pulumi/dynamic/__main__.py `_abort_with_traceback`): it precedes the
                # message (docs/testing.md, "What the real engine showed").
        finally:
            fakes.resource_manager.enforced = set()
        policy = f"projects/{PROJECT}/policies/{MANAGED_REQUIRE_OS_LOGIN}"
        assert policy in fakes.resource_manager.v2_requests
        assert fakes.tpu.requests_for("queuedResources.create") == [], "a TPU was requested"
        assert fakes.fleet.history == []


def test_a_failing_start_fails_up_with_the_logs_reason(life: Lifecycle) -> None:
    with life.step("failed-start", after="org-policy"):
        engine = life.engine
        engine.config_set("tpu-vllm:vllm.gpuMemoryUtilization", "0.98", "--path")
        run = engine.up()
        assert run.returncode != 0, run.output
        out = run.output
        assert "vllm-ready" in out
        assert "RESOURCE_EXHAUSTED" in out, out[-4000:]
        assert "exit code 1" in out
        assert HF_TOKEN not in out
        [(_, _, vm)] = engine.fakes.fleet.history
        [started] = [i for i in vm.docker.invocations() if i["argv"][1:2] == ["run"]]
        assert " ".join(OOM_FLAG) in " ".join(started["argv"])
        assert engine.resource("tpu-qr") is not None  # the TPU is in the state: not lost


def test_the_next_up_after_the_fix_succeeds_from_that_state(life: Lifecycle) -> None:
    with life.step("fixed", after="failed-start"):
        engine = life.engine
        engine.config_set("tpu-vllm:vllm.gpuMemoryUtilization", "0.92", "--path")
        engine.up().check()
        fakes = engine.fakes
        assert len(fakes.tpu.requests_for("queuedResources.create")) == 1, "a second TPU"
        [(_, address, vm)] = fakes.fleet.history
        runs = [i for i in vm.docker.invocations() if i["argv"][1:2] == ["run"]]
        assert len(runs) == 2 and "0.92" in runs[1]["argv"]
        ready = engine.resource("vllm-ready")
        assert ready is not None and "TPU_VLLM_READY " in json.dumps(ready["outputs"])
        assert engine.outputs()["endpoint"] == f"http://{address}:8000"


def test_destroy(life: Lifecycle) -> None:
    with life.step("destroy", after="fixed"):
        engine = life.engine
        engine.pulumi("destroy", "--yes").check()
        engine.fakes.fleet.wait_settled()
        assert engine.fakes.fleet.running == []
        assert everything(engine.fakes.standin_state) == {}
