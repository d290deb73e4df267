"""The node's SSH host key, read through the TPU API fake: present, late, absent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from components.vm.host_key import NodeHostKeyProvider, pick_host_key
from components.vm.org_policy import DISABLE_GUEST_ATTRIBUTES, MANAGED_DISABLE_GUEST_ATTRIBUTES
from components.vm.queued_resource_spec import Spec
from components.vm.tpu_api import ApiError, TpuApi
from tests.support.fakes.resource_manager import FakeResourceManager
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.queued_resource_props import props_for

HOST_KEY_BLOB = "AAAAC3NzaC1lZDI1NTE5AAAAIJustAHostKeyForTheTestsOnly000000000000"


@pytest.fixture
def active_node(fake_tpu: FakeTpuApi, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A node that reached ACTIVE with guest attributes enabled; yields its resource name."""
    monkeypatch.setenv("TPU_API_ENDPOINT", fake_tpu.base_url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", fake_tpu.token)
    fake_tpu.host_keys = {"ssh-ed25519": HOST_KEY_BLOB}
    spec = Spec.from_props(props_for("v5e1"))
    zone = spec.zones[0]
    fake_tpu.discovery_client().projects().locations().queuedResources().create(
        parent=f"projects/{spec.project}/locations/{zone}",
        queuedResourceId=spec.qr_id,
        body=spec.body(zone),
    ).execute()
    assert fake_tpu.wait_for_state(spec.qr_name(zone), "ACTIVE", timeout=10) == "ACTIVE"
    yield spec.node_name(zone)


def props(node: str, **extra: Any) -> dict[str, Any]:
    return {
        "node_name": node,
        "node_create_time": "2026-11-29T14:00:00Z",
        "allow_unverified": False,
        "timeout_seconds": 2.0,
        "poll_seconds": 0.05,
        "retry_base_seconds": 0.01,
        "__provider": "opaque",
        **extra,
    }


def test_present_host_key_is_pinned(fake_tpu: FakeTpuApi, active_node: str) -> None:
    fake_tpu.host_key_mode = "present"
    result = NodeHostKeyProvider().create(props(active_node))
    assert result.outs is not None
    assert result.outs["host_key"] == f"ssh-ed25519 {HOST_KEY_BLOB}"
    calls = [r for r in fake_tpu.requests if r.path.endswith(":getGuestAttributes")]
    assert calls and calls[0].body == {"queryPath": "hostkeys/"}


def test_late_host_key_is_waited_for(fake_tpu: FakeTpuApi, active_node: str) -> None:
    fake_tpu.host_key_mode = "late"
    fake_tpu.host_key_delay = 0.6
    result = NodeHostKeyProvider().create(props(active_node))
    assert result.outs is not None
    assert result.outs["host_key"] == f"ssh-ed25519 {HOST_KEY_BLOB}"
    calls = [r for r in fake_tpu.requests if r.path.endswith(":getGuestAttributes")]
    assert len(calls) > 1  # it asked again until the key appeared


def test_absent_host_key_fails_with_a_clear_message(
    fake_tpu: FakeTpuApi, active_node: str, fake_resource_manager: FakeResourceManager
) -> None:
    fake_tpu.host_key_mode = "absent"
    with pytest.raises(Exception, match="published no SSH host key") as caught:
        NodeHostKeyProvider().create(props(active_node, timeout_seconds=0.5))
    assert "allowUnverifiedHostKey" in str(caught.value)


def test_absent_host_key_is_allowed_only_when_asked(
    fake_tpu: FakeTpuApi, active_node: str, fake_resource_manager: FakeResourceManager
) -> None:
    fake_tpu.host_key_mode = "absent"
    result = NodeHostKeyProvider().create(
        props(active_node, timeout_seconds=0.3, allow_unverified=True)
    )
    assert result.outs is not None
    assert result.outs["host_key"] is None


def test_an_allowed_unverified_host_key_is_not_polled_for(
    fake_tpu: FakeTpuApi, active_node: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the opt-in the node's metadata has no `enable-guest-attributes` (components/vm/ssh.py),
    so no key can appear: asking for one would only bill the full wait. Even a key that is
    there is not used: the opt-in means the node is not verified."""
    fake_tpu.host_key_mode = "present"
    result = NodeHostKeyProvider().create(
        props(active_node, timeout_seconds=600, allow_unverified=True)
    )
    assert result.outs is not None and result.outs["host_key"] is None
    assert not [r for r in fake_tpu.requests if r.path.endswith(":getGuestAttributes")]
    assert "WITHOUT host-key verification" in capsys.readouterr().err


@pytest.mark.parametrize(
    "constraint",
    [DISABLE_GUEST_ATTRIBUTES, MANAGED_DISABLE_GUEST_ATTRIBUTES],
    ids=["legacy", "managed"],
)
def test_blocked_guest_attributes_name_the_policy_and_the_way_out(
    fake_tpu: FakeTpuApi,
    active_node: str,
    fake_resource_manager: FakeResourceManager,
    constraint: str,
) -> None:
    """With either constraint enforced no key ever appears: say so, naming it (the managed one
    is read through Org Policy v2)."""
    fake_tpu.host_key_mode = "absent"
    fake_resource_manager.enforced = {constraint}
    with pytest.raises(Exception, match=f"{re.escape(constraint)} is enforced") as err:
        NodeHostKeyProvider().create(props(active_node, timeout_seconds=0.3))
    assert "tpu-vllm:access.allowUnverifiedHostKey" in str(err.value)
    assert ("test-project", f"constraints/{DISABLE_GUEST_ATTRIBUTES}") in (
        fake_resource_manager.requests
    )


def test_a_refused_guest_attributes_read_stops_waiting_and_explains(
    active_node: str,
    fake_resource_manager: FakeResourceManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the API refuses the read (as it may under that policy), no 10-minute wait follows."""
    fake_resource_manager.enforced = {DISABLE_GUEST_ATTRIBUTES}
    refusal = ApiError(403, "PERMISSION_DENIED", "Guest attributes access is disabled.")

    def refuse(*_args: object) -> dict[str, Any]:
        raise refusal

    monkeypatch.setattr(TpuApi, "get_guest_attributes", refuse)
    with pytest.raises(Exception, match="disableGuestAttributesAccess") as err:
        NodeHostKeyProvider().create(props(active_node, timeout_seconds=600))
    assert "allowUnverifiedHostKey" in str(err.value)
    fake_resource_manager.enforced = set()
    result = NodeHostKeyProvider().create(props(active_node, allow_unverified=True))
    assert result.outs is not None and result.outs["host_key"] is None


def test_a_new_node_gets_its_host_key_read_again() -> None:
    old = props("projects/p/locations/z/nodes/n")
    new = {**old, "node_create_time": "2026-11-30T09:00:00Z"}
    diff = NodeHostKeyProvider().diff("id", old, new)
    assert diff.replaces == ["node_create_time"]


def test_pick_host_key_prefers_ed25519() -> None:
    answer = {
        "guestAttributes": [
            {
                "queryPath": "hostkeys/",
                "queryValue": {
                    "items": [
                        {"namespace": "hostkeys", "key": "ssh-rsa", "value": "AAAAB3rsa"},
                        {"namespace": "hostkeys", "key": "ssh-ed25519", "value": "AAAAC3ed"},
                    ]
                },
            }
        ]
    }
    assert pick_host_key(answer) == "ssh-ed25519 AAAAC3ed"
    assert pick_host_key({}) is None
