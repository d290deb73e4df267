"""The v5e1 stack's queued resource, created in the loopback TPU API fake with the provider's own
body and held in one state, for the scripts that read it (renew, status).
"""

from __future__ import annotations

from components.vm.queued_resource_spec import Spec
from components.vm.tpu import FlexStartTpuArgs, queued_resource_args
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.mock_outputs import SERVED_IMAGE
from tests.support.queued_resource_props import SA_EMAIL
from tests.support.stack_config import stack_config

STACK = "v5e1"
ZONE = "us-west4-a"
QR_NAME = f"projects/test-project/locations/{ZONE}/queuedResources/tpu-vllm-{STACK}"


def request_tpu(fake: FakeTpuApi) -> str:
    """Create the v5e1 stack's queued resource in the fake with the provider's own body."""
    spec = Spec.from_props(
        queued_resource_args(
            FlexStartTpuArgs.of(
                stack_config(STACK), SERVED_IMAGE, {"enable-guest-attributes": "TRUE"}
            ),
            service_account_email=SA_EMAIL,
            network_tag=f"tpu-vllm-{STACK}",
        ).props()
    )
    queued = fake.discovery_client().projects().locations().queuedResources()
    parent = f"projects/{spec.project}/locations/{ZONE}"
    queued.create(parent=parent, queuedResourceId=spec.qr_id, body=spec.body(ZONE)).execute()
    assert spec.qr_name(ZONE) == QR_NAME
    return QR_NAME


def in_state(fake: FakeTpuApi, state: str) -> str:
    """A queued resource held in `state` (the fake's states last 0.2 s of its clock each)."""
    if state == "FAILED":
        fake.set_zone(ZONE, "fail", f'There is no more capacity in the zone "{ZONE}"')
    name = request_tpu(fake)
    if state == "WAITING_FOR_RESOURCES":
        fake.advance(0.45)
    elif state == "PROVISIONING":
        fake.advance(0.65)
    else:
        fake.advance(1.0)
    if state in ("SUSPENDING", "SUSPENDED"):
        fake.expire(name)  # the run ends: the node is gone (404) from now on
        fake.advance(0.5 if state == "SUSPENDED" else 0.0)
    assert fake.state(name) == state
    return name
