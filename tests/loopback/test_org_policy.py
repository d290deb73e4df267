"""Org policies that make a node unusable stop the run before any TPU is requested.

The gate's provider runs against a loopback fake of Cloud Resource Manager v1 and of the
Organization Policy API v2 (`tests/support/fakes/resource_manager.py`, modelled on the discovery
documents google-api-python-client bundles); under Pulumi mocks no provider runs, so the
program-level tests check the gate's place in the graph: the queued resource depends on it.
"""

from __future__ import annotations

import pytest

from components.vm.org_policy import (
    DISABLE_GUEST_ATTRIBUTES,
    MANAGED_DISABLE_GUEST_ATTRIBUTES,
    MANAGED_REQUIRE_OS_LOGIN,
    REQUIRE_OS_LOGIN,
    OrgPolicyGateProvider,
    evaluate_v2_policy,
    os_login_error,
    read_boolean_policy,
    read_managed_policy,
)
from tests.support.fakes.resource_manager import FakeResourceManager
from tests.support.pulumi_program import TEST_PROJECT, run_program

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
    # The managed constraints, through Org Policy v2 (the fake answers `enforce: false`).
    assert fake_resource_manager.v2_requests == [
        f"projects/{TEST_PROJECT}/policies/{MANAGED_REQUIRE_OS_LOGIN}",
        f"projects/{TEST_PROJECT}/policies/{MANAGED_DISABLE_GUEST_ATTRIBUTES}",
    ]
    assert capsys.readouterr().err == ""


def test_enforced_managed_os_login_stops_naming_the_constraint_and_the_fix(
    fake_resource_manager: FakeResourceManager,
) -> None:
    fake_resource_manager.enforced = {MANAGED_REQUIRE_OS_LOGIN}
    with pytest.raises(
        Exception, match=r"constraint compute\.managed\.requireOsLogin is enf"
    ) as err:
        OrgPolicyGateProvider().check({}, news(allow_unverified=True))
    message = str(err.value)
    assert TEST_PROJECT in message
    assert "`enable-oslogin` metadata" in message
    assert "Nothing was requested" in message
    assert (
        f"Fix: ask your organization admin to exempt the project from {MANAGED_REQUIRE_OS_LOGIN}"
        in (message)
    )
    # Stopped at the OS Login answer: guest attributes were not even asked about.
    assert fake_resource_manager.v2_requests == [
        f"projects/{TEST_PROJECT}/policies/{MANAGED_REQUIRE_OS_LOGIN}"
    ]


def test_enforced_managed_guest_attributes_are_handled_like_the_legacy_constraint(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_resource_manager.enforced = {MANAGED_DISABLE_GUEST_ATTRIBUTES}
    with pytest.raises(Exception, match=r"compute\.managed\.disableGuestAttributesAccess") as err:
        OrgPolicyGateProvider().check({}, news())
    assert "SSH host key is never available" in str(err.value)
    assert "tpu-vllm:access.allowUnverifiedHostKey" in str(err.value)
    assert OrgPolicyGateProvider().check({}, news(allow_unverified=True)).failures == []
    warned = capsys.readouterr().err
    assert MANAGED_DISABLE_GUEST_ATTRIBUTES in warned
    assert "WITHOUT host-key verification" in warned
    # What the managed constraint looks at, and that the node's metadata leaves it out.
    assert "leaves out `enable-guest-attributes`" in warned
    assert "still asks" not in warned


@pytest.mark.parametrize("cause", ["v2_disabled", "forbidden"])
def test_an_unreadable_v2_policy_warns_naming_each_unchecked_constraint(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str], cause: str
) -> None:
    setattr(fake_resource_manager, cause, True)
    assert OrgPolicyGateProvider().check({}, news()).failures == []
    err = capsys.readouterr().err
    for constraint in (MANAGED_REQUIRE_OS_LOGIN, MANAGED_DISABLE_GUEST_ATTRIBUTES):
        assert f"could not read the organization policy {constraint}" in err
        assert f"{constraint} was NOT checked" in err
    assert "orgpolicy.googleapis.com" in err and "orgpolicy.policy.get" in err
    assert "PERMISSION_DENIED" in err
    if cause == "v2_disabled":  # the legacy constraints were read and are not enforced
        assert f"{REQUIRE_OS_LOGIN} was NOT checked" not in err
        assert "has not been used in project" in err


def test_a_legacy_constraint_enforced_still_stops_when_v2_cannot_be_read(
    fake_resource_manager: FakeResourceManager,
) -> None:
    fake_resource_manager.v2_disabled = True
    fake_resource_manager.enforced = {REQUIRE_OS_LOGIN}
    with pytest.raises(Exception, match=r"constraint compute\.requireOsLogin is enforced"):
        OrgPolicyGateProvider().check({}, news())


@pytest.mark.parametrize(
    ("answer", "enforced"),
    [
        ({"spec": {"rules": [{"enforce": True}]}}, True),
        ({"spec": {"rules": [{"enforce": False}]}}, False),
        ({}, False),  # nothing set anywhere: the constraint's default, not enforced
        ({"spec": {"reset": True}}, False),  # reset to the default
        ({"spec": {}, "dryRunSpec": {"rules": [{"enforce": True}]}}, False),  # audit only
    ],
    ids=["enforced", "not enforced", "no spec", "reset", "dry run only"],
)
def test_v2_policy_shapes_read_as_the_discovery_document_defines_them(
    fake_resource_manager: FakeResourceManager, answer: dict[str, object], enforced: bool
) -> None:
    fake_resource_manager.v2_answers[MANAGED_REQUIRE_OS_LOGIN] = answer
    assert read_managed_policy(TEST_PROJECT, MANAGED_REQUIRE_OS_LOGIN).enforced is enforced


def test_a_rule_enforced_under_a_tag_condition_is_reported_not_guessed(
    fake_resource_manager: FakeResourceManager, capsys: pytest.CaptureFixture[str]
) -> None:
    condition = {"expression": "resource.matchTag('123/env', 'prod')"}
    rules = [{"enforce": False}, {"enforce": True, "condition": condition}]
    fake_resource_manager.v2_answers[MANAGED_REQUIRE_OS_LOGIN] = {"spec": {"rules": rules}}
    assert OrgPolicyGateProvider().check({}, news()).failures == []
    err = capsys.readouterr().err
    assert f"{MANAGED_REQUIRE_OS_LOGIN} was NOT checked" in err
    assert "resource.matchTag('123/env', 'prod')" in err


def test_evaluating_a_v2_policy_needs_no_server() -> None:
    assert evaluate_v2_policy("c", {"spec": {"rules": [{"enforce": True}]}}).enforced is True
    assert evaluate_v2_policy("c", {"name": "projects/1/policies/c"}).enforced is False


def test_the_explanation_says_what_the_policy_and_the_agent_really_do() -> None:
    """compute.requireOsLogin makes Google Cloud reject `enable-oslogin=false` (Compute Engine
    "Manage OS Login in an organization"); the guest agent reads only the metadata
    (guest-agent google_guest_agent/oslogin.go getOSLoginEnabled), never the policy."""
    message = os_login_error(TEST_PROJECT)
    assert "rejects requests that set `enable-oslogin` to false" in message
    assert "never the policy" in message
    assert "cannot override the policy" not in message  # the old, wrong mechanism


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


def test_org_policy_api_endpoint_overrides_where_v2_is_asked(
    fake_resource_manager: FakeResourceManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = FakeResourceManager(token=fake_resource_manager.token).start()
    try:
        monkeypatch.setenv("ORG_POLICY_API_ENDPOINT", other.url)
        OrgPolicyGateProvider().check({}, news())
        assert fake_resource_manager.v2_requests == []
        assert len(other.v2_requests) == 2
        assert len(fake_resource_manager.requests) == 2  # v1 stays where it was
    finally:
        other.stop()
