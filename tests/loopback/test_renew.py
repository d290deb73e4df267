"""`scripts/renew.py` against the loopback TPU API fake and a fake `pulumi` CLI on PATH.

The queued resources are requested from the fake through the real discovery client with the
provider's own body, and the fake's clock is held still, so each state (PROVISIONING, ACTIVE,
SUSPENDED, FAILED, gone) is exactly the one the script sees. The script reaches the fake only
through `TPU_API_ENDPOINT`, so every test also proves it honours that variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from components import renewal
from components.renewal import renew_command
from components.vm.queued_resource_spec import (
    DEAD_STATES,
    ENDED_STATES,
    FINAL_STATES,
    LEAVING_STATES,
    LIVE_STATES,
    STATES,
)
from scripts import renew
from tests.support import discovery
from tests.support.fakes.fake_pulumi import FakePulumi
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.mock_outputs import EXPIRES_AT
from tests.support.pulumi_program import ROOT, run_program
from tests.support.queued_resource_states import STACK, ZONE, in_state, request_tpu

UP = ["up", "--refresh", "--yes", "-s", STACK]
STACK_OUTPUT = ["stack", "output", "--json", "-s", STACK]
SECRET_SENTINEL = "RENEWSECRETSENTINEL0123456789"
RENEWED = {
    "endpoint": "http://v5e1.models.example.com:8000",
    "endpoint_ip": "http://203.0.113.99:8000",
    "expires_at": "2026-11-30T16:00:00Z",
}


def stack_outputs(queued_resource: str | None) -> dict[str, Any]:
    outputs: dict[str, Any] = {
        "endpoint": "http://v5e1.models.example.com:8000",
        "endpoint_ip": "http://203.0.113.10:8000",
        "api_key": SECRET_SENTINEL,
        "expires_at": "2026-11-30T12:00:00Z",
        "renew_command": renew_command(STACK),
    }
    if queued_resource is not None:
        outputs["queued_resource"] = queued_resource
    return outputs


def deployed(fake: FakePulumi, queued_resource: str | None) -> FakePulumi:
    fake.add_stack(STACK, stack_outputs(queued_resource), secrets=("api_key",), after_up=RENEWED)
    return fake


def run_renew(capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = renew.main([STACK])
    out, err = capfd.readouterr()
    assert SECRET_SENTINEL not in out + err
    return status, out, err


def renew_in_state(
    state: str, manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> tuple[str, str]:
    """Deploy a stack whose queued resource is in `state`, renew it; (its name, stdout)."""
    name = in_state(manual_tpu, state)
    deployed(fake_pulumi, name)
    status, out, _ = run_renew(capfd)
    assert status == 0
    return name, out


def test_active_means_nothing_to_do(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    name = in_state(manual_tpu, "ACTIVE")
    deployed(fake_pulumi, name)
    before = len(manual_tpu.requests)
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT]  # no `pulumi up`: no TPU time, no change
    # One read of the queued resource, nothing else: no create, no delete.
    assert [(r.method, r.path.endswith(name)) for r in manual_tpu.requests[before:]] == [
        ("GET", True)
    ]
    assert "ACTIVE: the node is serving; nothing to do" in out
    assert manual_tpu.state(name) == "ACTIVE"


@pytest.mark.parametrize("state", ["PROVISIONING", "WAITING_FOR_RESOURCES"])
def test_a_tpu_on_its_way_up_is_left_to_finish(
    state: str, manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    name, out = renew_in_state(state, manual_tpu, fake_pulumi, capfd)
    assert fake_pulumi.argvs() == [STACK_OUTPUT]
    assert f"{state}: the node is on its way up; nothing to do now" in out
    assert manual_tpu.state(name) == state


@pytest.mark.parametrize("state", ["SUSPENDED", "FAILED"])
def test_an_ended_queued_resource_is_renewed(
    state: str, manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    _, out = renew_in_state(state, manual_tpu, fake_pulumi, capfd)
    assert fake_pulumi.argvs()[:2] == [STACK_OUTPUT, UP]
    assert all(call["cwd"] == str(ROOT) for call in fake_pulumi.calls())  # where Pulumi.yaml is
    assert f"{state}:" in out
    assert f"renewing: `pulumi up --refresh --yes -s {STACK}`" in out
    assert "renewed: `pulumi up` succeeded" in out
    assert f'endpoint: "{RENEWED["endpoint"]}"' in out  # pulumi's Outputs reach the log
    assert RENEWED["expires_at"] in out
    assert fake_pulumi.argvs() == [STACK_OUTPUT, UP]  # `up` is the last thing it does
    assert "Updating (v5e1)" in out  # pulumi's own progress reached the log


def test_a_run_that_is_ending_is_renewed_once_it_has_ended(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """Right after the run ends the node is already gone (404) while the queued resource is
    still SUSPENDING: the script waits (a `pulumi up` now would race the service's own
    suspension), and the next run, once it is SUSPENDED, renews."""
    name, out = renew_in_state("SUSPENDING", manual_tpu, fake_pulumi, capfd)
    node = f"projects/test-project/locations/{ZONE}/nodes/tpu-vllm-{STACK}-node"
    nodes = manual_tpu.discovery_client().projects().locations().nodes()
    with pytest.raises(HttpError) as gone:
        nodes.get(name=node).execute()
    assert gone.value.resp.status == 404
    assert fake_pulumi.argvs() == [STACK_OUTPUT]
    assert "SUSPENDING: not ended yet; nothing to do now" in out
    manual_tpu.advance(0.5)
    assert manual_tpu.state(name) == "SUSPENDED"
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT, STACK_OUTPUT, UP]
    assert "SUSPENDED: its run ended and the VM was deleted" in out


def test_a_queued_resource_that_is_gone_is_renewed(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    name = request_tpu(manual_tpu)
    manual_tpu.advance(1.0)
    manual_tpu.discovery_client().projects().locations().queuedResources().delete(
        name=name, force=True
    ).execute()
    manual_tpu.advance(1.0)
    assert manual_tpu.state(name) is None
    deployed(fake_pulumi, name)
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs()[:2] == [STACK_OUTPUT, UP]
    assert "gone" in out
    gets = [r for r in manual_tpu.requests if r.method == "GET" and r.path.endswith(name)]
    assert gets and gets[-1].status == 404


@pytest.mark.parametrize("value", [None, ""], ids=["no output", "empty output"])
def test_a_stack_without_a_queued_resource_is_deployed(
    value: str | None,
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    capfd: pytest.CaptureFixture[str],
) -> None:
    deployed(fake_pulumi, value)
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs()[:2] == [STACK_OUTPUT, UP]
    assert "no queued_resource output" in out
    assert manual_tpu.requests == []  # nothing to ask the API about


def test_stack_output_failure_exits_non_zero_with_the_cli_reason(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_renew(capfd)  # the fake knows no stack v5e1
    assert status == renew.EXIT_UNKNOWN_STATE != 0
    assert "error: no stack named 'v5e1' found" in err
    assert f"`pulumi stack output --json -s {STACK}` failed (exit status 255)" in err
    assert fake_pulumi.argvs() == [STACK_OUTPUT]
    assert manual_tpu.requests == []


def test_a_failed_up_exits_non_zero_with_the_cli_reason(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    deployed(fake_pulumi, in_state(manual_tpu, "SUSPENDED"))
    locked = (
        "the stack is currently locked by 1 lock(s). Either wait for the other process(es) "
        "to end or delete the lock file with `pulumi cancel`."
    )
    fake_pulumi.fail("up", locked)
    status, _, err = run_renew(capfd)
    assert status == renew.EXIT_RENEW_FAILED != 0
    assert f"`pulumi up --refresh --yes -s {STACK}` failed (exit status 255)" in err
    assert "the stack is currently locked" in err
    assert fake_pulumi.argvs() == [STACK_OUTPUT, UP]


def test_a_tpu_api_refusal_exits_non_zero_and_does_not_renew(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    name = in_state(manual_tpu, "SUSPENDED")
    deployed(fake_pulumi, name)
    manual_tpu.fail_next(status=403, methods=["queuedResources.get"], message="Permission denied")
    status, _, err = run_renew(capfd)
    assert status == renew.EXIT_UNKNOWN_STATE
    assert "PERMISSION_DENIED (403): Permission denied" in err
    assert fake_pulumi.argvs() == [STACK_OUTPUT]  # unknown state: no `pulumi up`


def test_no_pulumi_cli_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    status, _, err = run_renew(capfd)
    assert status == renew.EXIT_UNKNOWN_STATE
    assert "the pulumi CLI is not on PATH" in err


def test_outputs_are_read_without_secrets(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    deployed(fake_pulumi, in_state(manual_tpu, "ACTIVE"))
    run_renew(capfd)  # asserts the sentinel never shows
    assert all("--show-secrets" not in argv for argv in fake_pulumi.argvs())


#: Without a renewal window: what the script does in each of the API's states, and when gone.
DECISIONS = [
    (None, True),
    ("SUSPENDED", True),
    ("FAILED", True),
    ("ACTIVE", False),
    ("CREATING", False),
    ("ACCEPTED", False),
    ("WAITING_FOR_RESOURCES", False),
    ("PROVISIONING", False),
    ("SUSPENDING", False),
    ("DELETING", False),
    ("STATE_UNSPECIFIED", False),
]


@pytest.mark.parametrize(("state", "renews"), DECISIONS)
def test_only_ended_or_gone_queued_resources_are_renewed(state: str | None, renews: bool) -> None:
    assert renew.decide(state).renew is renews


def test_the_state_names_are_the_tpu_apis_own_and_shared_with_the_provider() -> None:
    """One set of names: the API's enum, split into live, final and leaving; the provider's
    dead and ended states are built from them, unchanged. The decisions above cover every
    state, and renew exactly the final ones."""
    schema = discovery.document("tpu.v2alpha1")["schemas"]["QueuedResourceState"]
    assert list(STATES) == schema["properties"]["state"]["enum"]
    named = [state for group in (LIVE_STATES, FINAL_STATES, LEAVING_STATES) for state in group]
    assert sorted([*named, "STATE_UNSPECIFIED"]) == sorted(STATES)  # each state once
    assert {"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"} == DEAD_STATES
    assert {"SUSPENDING", "SUSPENDED", "FAILED"} == ENDED_STATES
    assert {state for state, _ in DECISIONS} == {None, *STATES}
    assert {state for state, renews in DECISIONS if renews and state} == FINAL_STATES


def test_the_script_runs_from_a_shell_like_cron_would(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi
) -> None:
    """`.venv/bin/python -m scripts.renew STACK` in the project root, as cron's `cd` and the
    workflow run it: imports resolve, exit 0."""
    deployed(fake_pulumi, in_state(manual_tpu, "SUSPENDED"))
    done = subprocess.run(
        [sys.executable, "-m", "scripts.renew", STACK],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert fake_pulumi.argvs()[:2] == [STACK_OUTPUT, UP]
    assert fake_pulumi.calls()[1]["env"]["TPU_API_ENDPOINT"] == manual_tpu.base_url
    assert "renewed:" in done.stdout


def test_bad_stack_name_is_refused(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        renew.main(["-s; rm -rf /"])
    assert exit_info.value.code == 2
    assert "not a stack name" in capfd.readouterr().err


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_the_stack_says_what_will_happen_and_when(stack: str) -> None:
    """`renew_command` is the command to run, and `pulumi up` ends by saying when the run ends
    and what brings the node back."""
    run = run_program(stack)
    assert run.outputs["renew_command"] == f".venv/bin/python -m scripts.renew {stack}"
    assert run.outputs["expires_at"] == EXPIRES_AT
    [notice] = [message for _, message in run.log if "flex-start run ends" in message]
    assert f"ends at {EXPIRES_AT}" in notice
    assert f"`.venv/bin/python -m scripts.renew {stack}`" in notice
    assert "every 15 minutes" in notice


def test_a_spot_stack_is_told_it_has_no_run_limit() -> None:
    run = run_program(
        "v5e1", {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    )
    assert run.outputs["renew_command"] == ".venv/bin/python -m scripts.renew v5e1"
    assert any("no run limit" in message for _, message in run.log)


def test_a_gke_stack_is_never_renewed(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """Backend gke exports `queued_resource: ""` and its cluster; GKE replaces ended nodes."""
    outputs = {
        **stack_outputs(""),
        "renew_command": "",
        "expires_at": "",
        "cluster": "projects/p/locations/us-east5/clusters/tpu-vllm-v6e4-gke",
    }
    fake_pulumi.add_stack(STACK, outputs, secrets=("api_key",), after_up=RENEWED)
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT]  # no `pulumi up`
    assert "GKE replaces each ended TPU node" in out
    assert manual_tpu.requests == []


# -- renewing inside the window, before the run ends ------------------------------------------


def windowed(
    fake: FakePulumi, queued_resource: str, lead_seconds: float, expires_at: str | None = None
) -> FakePulumi:
    """A deployed stack whose outputs carry `renewal_lead_seconds`."""
    outputs = {**stack_outputs(queued_resource), "renewal_lead_seconds": lead_seconds}
    if expires_at is not None:
        outputs["expires_at"] = expires_at
    fake.add_stack(STACK, outputs, secrets=("api_key",), after_up=RENEWED)
    return fake


def test_active_inside_the_renewal_window_is_renewed_before_it_ends(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """The fake's run ends 4 h after ACTIVE (maxRunDuration 14400 s); a lead longer than what
    is left puts it inside the window: `pulumi up --refresh` runs while it is still ACTIVE."""
    name = in_state(manual_tpu, "ACTIVE")
    windowed(fake_pulumi, name, lead_seconds=4 * 3600 + 60)
    status, out, _ = run_renew(capfd)
    assert status == 0
    # After the up, the outputs name another node: renewed, nothing more to do.
    assert fake_pulumi.argvs() == [STACK_OUTPUT, UP, STACK_OUTPUT]
    assert "inside the renewal window" in out
    assert "of its run left" in out
    assert manual_tpu.state(name) == "ACTIVE"  # the script deletes nothing: `pulumi up` does, later


def test_an_up_that_only_stored_changed_settings_is_followed_by_the_renewal(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """Inside the window, an up whose diff found `renewal.drain` or
    `tpu.zones` changed since the node's create only stores them (the renewal's delete of the
    node must use them) and renews at the next up. The script runs that next up at once, once:
    the stack still names the same node."""
    name = in_state(manual_tpu, "ACTIVE")
    outputs = {**stack_outputs(name), "renewal_lead_seconds": 4 * 3600 + 60}
    fake_pulumi.add_stack(STACK, outputs, secrets=("api_key",), after_up=outputs)
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT, UP, STACK_OUTPUT, UP]
    assert f"{name} is still the stack's node: that `pulumi up` stored settings" in out


def test_active_with_more_than_the_lead_left_is_left_alone(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    name = in_state(manual_tpu, "ACTIVE")
    windowed(fake_pulumi, name, lead_seconds=3600)  # 4 h left, renew from 1 h before the end
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT]  # no `pulumi up`
    assert "ACTIVE: the node is serving; nothing to do" in out
    assert "renewing from 1 h before the end" in out


def test_the_end_time_comes_from_the_api_before_the_stale_output(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """The outputs' `expires_at` says the run ends in 10 minutes (stale: written for another
    node); the queued resource's own `runDuration.terminationTime` (4 h away) decides."""
    name = in_state(manual_tpu, "ACTIVE")
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 600))
    windowed(fake_pulumi, name, lead_seconds=3600, expires_at=soon)
    run_renew(capfd)
    assert fake_pulumi.argvs() == [STACK_OUTPUT]
    left = renewal.seconds_left(manual_tpu.queued_resource(name)["runDuration"]["terminationTime"])
    assert left is not None and left > 3600


def test_the_outputs_end_time_is_used_when_the_api_gives_none(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """Without `runDuration.terminationTime` (the provider then read the node's
    `schedulingConfig.terminationTimestamp` into `expires_at`), the output decides."""
    manual_tpu.qr_reports_termination_time = False
    name = in_state(manual_tpu, "ACTIVE")
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 600))
    windowed(fake_pulumi, name, lead_seconds=3600, expires_at=soon)
    run_renew(capfd)
    assert fake_pulumi.argvs() == [STACK_OUTPUT, UP, STACK_OUTPUT]


def test_a_stack_without_the_lead_output_is_renewed_only_once_ended(
    manual_tpu: FakeTpuApi, fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]
) -> None:
    """Deployed before renewal windows existed: no `renewal_lead_seconds`, so ACTIVE is left
    alone however little is left, and the log says how to get the window."""
    deployed(fake_pulumi, in_state(manual_tpu, "ACTIVE"))
    status, out, _ = run_renew(capfd)
    assert status == 0
    assert fake_pulumi.argvs() == [STACK_OUTPUT]
    assert "no renewal_lead_seconds output" in out


@pytest.mark.parametrize(
    ("state", "left", "lead", "renews"),
    [
        ("ACTIVE", 1800.0, 3900.0, True),
        ("ACTIVE", -5.0, 3900.0, True),  # past its end, not yet SUSPENDING
        ("ACTIVE", 7200.0, 3900.0, False),
        ("ACTIVE", 1800.0, None, False),
        ("ACTIVE", None, 3900.0, False),
        ("PROVISIONING", 1800.0, 3900.0, False),
        ("SUSPENDING", 10.0, 3900.0, False),
    ],
)
def test_the_window_is_active_with_less_than_the_lead_left(
    state: str, left: float | None, lead: float | None, renews: bool
) -> None:
    assert renew.decide(state, left, lead).renew is renews
