"""The queued-resource provider never leaves a requested TPU behind after an unexpected error.

Pulumi records nothing for a dynamic resource whose `create` raised, so a queued resource that
was requested and then abandoned by a crash is invisible to `pulumi destroy`: it waits for
capacity, turns ACTIVE and bills until someone finds it by hand. Zone rejections are cleaned up
by the zone failover; these tests cover the other errors, the ones the provider does not expect
(a 403 while polling, when a grant is revoked or an org policy bites mid-wait).

Driven against the loopback TPU v2alpha1 fake (`tests/support/fakes/tpu_api.py`) with its fault
injection (`fail_next`), with props built the way the program builds them.
"""

from __future__ import annotations

from typing import Any

import pytest

from components import config as config_module
from components.vm.queued_resource import QueuedResourceProvider
from components.vm.tpu import FlexStartTpuArgs, queued_resource_args
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.mock_outputs import SERVED_IMAGE
from tests.support.pulumi_program import stack_file_config

FAST = {
    "poll_seconds": 0.05,
    "provisioning_timeout_seconds": 10.0,
    "delete_timeout_seconds": 10.0,
    "retry_attempts": 3,
    "retry_base_seconds": 0.01,
}
PROJECT = "test-project"
#: The polls a provider makes once the create went out: the queued resource itself, or the
#: create's long-running operation (gcloud waits on that; see DESIGN.md).
POLLS = ["queuedResources.get", "operations.get"]


def provider_props(stack: str) -> dict[str, Any]:
    """The provider's props for a committed stack, as the engine hands them over."""
    raw = stack_file_config(stack)
    sections = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("tpu-vllm:")}
    cfg = config_module.parse_stack_config(sections, project=PROJECT, stack=stack)
    props = queued_resource_args(
        FlexStartTpuArgs.of(cfg, SERVED_IMAGE, {"enable-guest-attributes": "TRUE"}),
        service_account_email=f"tpu-vllm-{stack}@{PROJECT}.iam.gserviceaccount.com",
        network_tag=f"tpu-vllm-{stack}",
        timing=FAST,
    ).props()
    return {**props, "__provider": "opaque"}


def created(fake: FakeTpuApi) -> list[str]:
    """Paths of the create requests the fake accepted."""
    return [
        r.path
        for r in fake.requests_for("queuedResources.create")
        if r.method == "POST" and r.status == 200
    ]


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_a_403_while_polling_deletes_the_requested_tpu_and_reports_the_403(
    tpu_env: FakeTpuApi, stack: str
) -> None:
    props = provider_props(stack)
    qr_id = f"tpu-vllm-{stack}"
    # The create goes out and is accepted; the first poll after it is refused.
    tpu_env.fail_next(
        1, status=403, methods=POLLS, message="Permission 'tpu.queuedResources.get' denied"
    )
    with pytest.raises(Exception) as raised:
        QueuedResourceProvider().create(props)
    assert len(created(tpu_env)) == 1, "the create request never went out"
    # The error the operator sees is the 403 itself, not a zone failover summary.
    assert "403" in str(raised.value) or "PERMISSION_DENIED" in str(raised.value)
    assert "no zone could provide" not in str(raised.value)
    # Only the first zone was tried: an unexpected error is not a reason to queue elsewhere.
    assert len(created(tpu_env)) == 1
    # ... and nothing is left behind: a delete went out and the queued resource is gone.
    assert tpu_env.requests_for("queuedResources.delete"), "no delete was sent"
    assert tpu_env.state(qr_id) is None, (
        f"{qr_id} was left {tpu_env.state(qr_id)} after the failure"
    )


def test_a_failed_cleanup_still_raises_the_original_error(tpu_env: FakeTpuApi) -> None:
    # The poll is refused, and so is every delete: the operator must still see the original
    # error (the cleanup's own failure is reported beside it, not instead of it).
    props = provider_props("v5e1")
    tpu_env.fail_next(
        1, status=403, methods=POLLS, message="Permission 'tpu.queuedResources.get' denied"
    )
    tpu_env.fail_next(50, status=403, methods=["queuedResources.delete"])
    with pytest.raises(Exception) as raised:
        QueuedResourceProvider().create(props)
    assert "403" in str(raised.value) or "PERMISSION_DENIED" in str(raised.value)
    assert "queuedResources.get" in str(raised.value)
    assert tpu_env.requests_for("queuedResources.delete"), "no delete was attempted"
