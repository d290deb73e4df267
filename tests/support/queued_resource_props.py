"""The queued-resource provider's props for a committed stack, as the engine hands them over
(numbers as floats, the `__provider` key), with its timing shrunk so that a lifecycle against the
loopback TPU API fake takes a second.
"""

from __future__ import annotations

from typing import Any

from components.vm.tpu import FlexStartTpuArgs, queued_resource_args
from tests.support.mock_outputs import SERVED_IMAGE
from tests.support.stack_config import stack_config

FAST = {
    "poll_seconds": 0.05,
    "provisioning_timeout_seconds": 10.0,
    "delete_timeout_seconds": 10.0,
    "retry_attempts": 4,
    "retry_base_seconds": 0.01,
}
#: The node's service account, as the program names it for the v5e1 stack.
SA_EMAIL = "tpu-vllm-v5e1@test-project.iam.gserviceaccount.com"


def as_engine(value: Any) -> Any:
    """What a dynamic provider receives: every number as a float, plus the `__provider` key."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: as_engine(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_engine(v) for v in value]
    return value


def props_for(stack: str, **tpu_changes: Any) -> dict[str, Any]:
    """The props the program gives the stack's queued resource (its `tpu` section with
    `tpu_changes`), as the provider receives them."""
    cfg = stack_config(stack, **tpu_changes)
    props = queued_resource_args(
        FlexStartTpuArgs.of(cfg, SERVED_IMAGE, {"enable-guest-attributes": "TRUE"}),
        service_account_email=SA_EMAIL,
        network_tag=f"tpu-vllm-{stack}",
        timing=FAST,
    ).props()
    return {**as_engine(props), "__provider": "opaque"}


def outs_of(result: Any) -> dict[str, Any]:
    """A provider result's outputs (the SDK types them as optional)."""
    assert result.outs is not None
    return dict(result.outs)
