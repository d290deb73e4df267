"""Org policies that make a node unusable stop the run before any TPU is requested.

The gate's provider runs against a loopback fake of Cloud Resource Manager v1
(`tests/fakes/resource_manager.py`); under Pulumi mocks no provider runs, so the program-level
tests check the gate's place in the graph: the queued resource depends on it.
"""

from __future__ import annotations

import os

import pytest

from components.org_policy import (
    DISABLE_GUEST_ATTRIBUTES,
    REQUIRE_OS_LOGIN,
    OrgPolicyGateProvider,
    read_boolean_policy,
)
from tests.fakes.resource_manager import FakeResourceManager
from tests.provider_host import provider_blob, run_provider
from tests.pulumi_program import TEST_PROJECT, run_program

DYNAMIC = "pulumi-python:dynamic:Resource"


def news(allow_unverified: bool = False) -> dict[str, object]:
    return {
        "project": TEST_PROJECT,
        "allow_unverified_host_key": allow_unverified,
        "__provider": "opaque",
    }


def test_nothing_enforced_passes_and_asks_about_both_constraints(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str]
) -> None:
    result = OrgPolicyGateProvider().check({}, news())
    assert result.failures == []
    assert fake_resource_manager.requests == [
        (TEST_PROJECT, f"constraints/{REQUIRE_OS_LOGIN}"),
        (TEST_PROJECT, f"constraints/{DISABLE_GUEST_ATTRIBUTES}"),
    ]
    assert capsys.readouterr().err == ""


def test_enforced_os_login_stops_with_the_constraint_named(
    fake_resource_manager: FakeResourceManager,
) -> None:
    fake_resource_manager.enforced = {REQUIRE_OS_LOGIN}
    with pytest.raises(Exception, match=r"constraint compute\.requireOsLogin is enforced") as err:
        OrgPolicyGateProvider().check({}, news(allow_unverified=True))
    assert TEST_PROJECT in str(err.value)
    assert "Nothing was requested" in str(err.value)


def test_unreadable_policies_warn_and_go_on(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_resource_manager.forbidden = True
    result = OrgPolicyGateProvider().check({}, news())
    assert result.failures == []
    err = capsys.readouterr().err
    assert f"could not read the organization policy {REQUIRE_OS_LOGIN}" in err
    assert "orgpolicy.policy.get" in err and "PERMISSION_DENIED" in err


def test_blocked_guest_attributes_stop_unless_unverified_keys_are_accepted(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_resource_manager.enforced = {DISABLE_GUEST_ATTRIBUTES}
    with pytest.raises(Exception, match=DISABLE_GUEST_ATTRIBUTES.replace(".", r"\.")) as err:
        OrgPolicyGateProvider().check({}, news())
    assert "SSH host key is never available" in str(err.value)
    assert "tpu-vllm:access.allowUnverifiedHostKey" in str(err.value)
    OrgPolicyGateProvider().check({}, news(allow_unverified=True))
    assert "WITHOUT host-key verification" in capsys.readouterr().err


def test_read_boolean_policy_reads_the_effective_value(
    fake_resource_manager: FakeResourceManager,
) -> None:
    assert read_boolean_policy("p", REQUIRE_OS_LOGIN).enforced is False
    fake_resource_manager.enforced = {REQUIRE_OS_LOGIN}
    assert read_boolean_policy("p", REQUIRE_OS_LOGIN).enforced is True


def test_the_tpu_request_waits_for_the_gate() -> None:
    run = run_program("v5e1", {"tpu-vllm:access.allowUnverifiedHostKey": True})
    [gate] = [r for r in run.of_type(DYNAMIC) if r.name == "tpu-org-policy"]
    assert gate.inputs["project"] == TEST_PROJECT
    assert gate.inputs["allow_unverified_host_key"] is True
    assert "tpu-org-policy" in run.dependencies["tpu-qr"]
    assert "tpu-vllm:index:FlexStartTpu$" in run.urn_of("tpu-org-policy")


def test_gate_check_runs_as_the_provider_host_runs_it(
    fake_resource_manager: FakeResourceManager,
) -> None:
    """Pickled under mocks, unpickled in a fresh interpreter in the project root (as Pulumi's
    dynamic provider host does), its check still reaches the endpoint it is given."""
    blob = provider_blob(run_program("v5e1"), "tpu-org-policy")
    fake_resource_manager.enforced = {REQUIRE_OS_LOGIN}
    done = run_provider(
        blob,
        "provider.check({}, {'project': 'test-project', 'allow_unverified_host_key': False})\n",
        env={
            "RESOURCE_MANAGER_API_ENDPOINT": os.environ["RESOURCE_MANAGER_API_ENDPOINT"],
            "GOOGLE_OAUTH_ACCESS_TOKEN": fake_resource_manager.token,
        },
    )
    assert done.returncode != 0
    assert REQUIRE_OS_LOGIN in done.stderr
    assert fake_resource_manager.requests  # it asked the fake, nobody else
