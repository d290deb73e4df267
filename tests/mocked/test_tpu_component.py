"""FlexStartTpu under Pulumi mocks: what `pulumi up` would register for each stack."""

from __future__ import annotations

import pytest

from tests.support.mock_outputs import EXPIRES_AT, EXTERNAL_IP, INTERNAL_IP, cloud_outputs
from tests.support.pulumi_program import run_program

DYNAMIC = "pulumi-python:dynamic:Resource"


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_tpu_component_registers_identity_request_and_firewalls(stack: str) -> None:
    run = run_program(stack, outputs_for=cloud_outputs)
    account = run.one("gcp:serviceaccount/account:Account")
    assert account.inputs["accountId"] == f"tpu-vllm-{stack}"
    [qr] = [r for r in run.of_type(DYNAMIC) if "qr_id" in r.inputs]
    props = qr.inputs
    assert (
        props["service_account_email"] == f"tpu-vllm-{stack}@test-project.iam.gserviceaccount.com"
    )
    assert props["provisioning"] == "flex-start"
    assert props["max_run_seconds"] == 14400
    assert props["tags"] == [f"tpu-vllm-{stack}"]
    assert props["labels"]["managed-by"] == "pulumi"
    # Everything is parented to the component.
    for name in ("tpu-sa", "tpu-qr", "tpu-serving", "tpu-ssh"):
        assert "tpu-vllm:index:FlexStartTpu$" in run.urn_of(name)


def test_firewalls_open_only_the_serving_port_and_ssh_to_their_ranges() -> None:
    run = run_program(
        "v5e1",
        {
            "tpu-vllm:access.allowedCidrs": ["198.51.100.0/24", "10.0.0.0/8"],
            "tpu-vllm:access.sshCidrs": ["192.0.2.0/28"],
        },
        outputs_for=cloud_outputs,
    )
    rules = {r.name: r.inputs for r in run.of_type("gcp:compute/firewall:Firewall")}
    serving, ssh = rules["tpu-serving"], rules["tpu-ssh"]
    assert serving["allows"] == [{"protocol": "tcp", "ports": ["8000"]}]
    assert serving["sourceRanges"] == ["198.51.100.0/24", "10.0.0.0/8"]
    assert ssh["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
    assert ssh["sourceRanges"] == ["192.0.2.0/28"]
    for rule in (serving, ssh):
        assert rule["targetTags"] == ["tpu-vllm-v5e1"]
        assert rule["direction"] == "INGRESS"


def test_ssh_defaults_to_the_serving_ranges() -> None:
    run = run_program("v6e4", outputs_for=cloud_outputs)
    rules = {r.name: r.inputs for r in run.of_type("gcp:compute/firewall:Firewall")}
    assert rules["tpu-ssh"]["sourceRanges"] == rules["tpu-serving"]["sourceRanges"]


def test_tpu_outputs_are_exported() -> None:
    run = run_program("v5e1", outputs_for=cloud_outputs)
    assert run.outputs["zone"] == "us-west4-a"
    assert run.outputs["queued_resource"] == (
        "projects/test-project/locations/us-west4-a/queuedResources/tpu-vllm-v5e1"
    )
    assert run.outputs["node"].endswith("/nodes/tpu-vllm-v5e1-node")
    assert run.outputs["external_ip"] == EXTERNAL_IP
    assert run.outputs["internal_ip"] == INTERNAL_IP
    assert run.outputs["expires_at"] == EXPIRES_AT
