"""Secrets and access under Pulumi mocks: who can read what, and where secrets never appear."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pulumi.runtime import mocks

from components.ssh_dial import PER_DIAL_TIMEOUT_SECONDS, dial_budget_seconds
from tests.support.mock_outputs import (
    API_KEY_SENTINEL,
    HOST_KEY,
    SSH_PRIVATE_SENTINEL,
    SSH_PUBLIC_KEY,
)
from tests.support.pulumi_program import InvokeFailure, ProgramRun, run_program

COMMAND = "command:remote:Command"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # how the SDK wraps a secret value on the wire
IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"


def text_of(value: Any) -> str:
    return json.dumps(value, default=str)


@pytest.fixture(scope="module", params=["v5e1", "v6e4"])
def run(request: pytest.FixtureRequest) -> ProgramRun:
    return run_program(request.param)


def test_missing_hf_token_secret_fails_before_anything_is_created() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:secretmanager/getSecret:getSecret":
            raise InvokeFailure("googleapi: Error 404: Secret [hf-token] not found")
        return dict(args.args)

    result = run_program("v5e1", call=call, expect_error=True)
    message = str(result.error)
    assert "tpu-vllm:access.hfTokenSecret" in message
    assert "projects/test-project/secrets/hf-token" in message
    assert "`.venv/bin/python -m scripts.save_hf_token --stack v5e1`" in message
    assert result.resources == []


def test_the_hf_secret_is_looked_up_not_read(run: ProgramRun) -> None:
    tokens = [token for token, _ in run_calls(run)]
    assert "gcp:secretmanager/getSecret:getSecret" in tokens
    assert not any("getSecretVersion" in t for t in tokens)  # would read the token's value


def run_calls(run: ProgramRun) -> list[tuple[str, dict[str, Any]]]:
    return run.calls


def test_only_the_node_service_account_may_read_the_two_secrets(run: ProgramRun) -> None:
    stack = run.outputs["vllm_args"] and run.outputs["queued_resource"].rsplit("-", 1)[-1]
    members = run.of_type(IAM)
    assert len(members) == 2
    email = f"serviceAccount:tpu-vllm-{stack}@test-project.iam.gserviceaccount.com"
    by_secret = {m.inputs["secretId"]: m.inputs for m in members}
    assert set(by_secret) == {"hf-token", f"tpu-vllm-{stack}-api-key"}
    for member in by_secret.values():
        assert member["role"] == "roles/secretmanager.secretAccessor"
        assert member["member"] == email


def test_api_key_is_a_per_stack_secret_version(run: ProgramRun) -> None:
    password = run.one("random:index/randomPassword:RandomPassword")
    assert password.inputs["length"] >= 32
    secret = run.one("gcp:secretmanager/secret:Secret")
    assert secret.inputs["replication"] == {"auto": {}}
    version = run.one("gcp:secretmanager/secretVersion:SecretVersion")
    data = version.inputs["secretData"]
    assert SECRET_SIG in data.values() and data["value"] == API_KEY_SENTINEL  # sent as a secret
    assert run.outputs["api_key"] == API_KEY_SENTINEL
    assert "api_key" in run.secret_outputs
    assert run.outputs["api_key_secret"].endswith("/secrets/" + secret.inputs["secretId"])
    assert "api_key_secret" not in run.secret_outputs


def test_secrets_never_reach_commands_metadata_or_plain_outputs(run: ProgramRun) -> None:
    for cmd in run.of_type(COMMAND):
        for key in ("create", "update", "delete", "triggers", "stdin", "environment"):
            assert API_KEY_SENTINEL not in text_of(cmd.inputs.get(key)), (cmd.name, key)
            assert SSH_PRIVATE_SENTINEL not in text_of(cmd.inputs.get(key)), (cmd.name, key)
        # The connection holds the private key, and only as a Pulumi secret.
        assert SECRET_SIG in text_of(cmd.inputs["connection"])
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    metadata = qr.inputs["metadata"]
    assert API_KEY_SENTINEL not in text_of(metadata)
    assert SSH_PRIVATE_SENTINEL not in text_of(metadata)
    for name, value in run.outputs.items():
        if name not in run.secret_outputs:
            assert API_KEY_SENTINEL not in text_of(value), name
            assert SSH_PRIVATE_SENTINEL not in text_of(value), name
    assert {"api_key", "ssh_private_key"} <= run.secret_outputs


def test_node_metadata_installs_the_login_key_and_guest_attributes(run: ProgramRun) -> None:
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert qr.inputs["metadata"] == {
        "ssh-keys": f"tpu-vllm:{SSH_PUBLIC_KEY} tpu-vllm",
        "enable-guest-attributes": "TRUE",
        # With OS Login on, the guest agent creates no user from ssh-keys (guest-agent
        # oslogin.go): the instance value overrides a project-wide TRUE.
        "enable-oslogin": "FALSE",
    }
    key = run.one("tls:index/privateKey:PrivateKey")
    assert key.inputs["algorithm"] == "ED25519"


def test_commands_pin_the_host_key_and_retry_dialling(run: ProgramRun) -> None:
    for cmd in run.of_type(COMMAND):
        connection = cmd.inputs["connection"]["value"]
        assert connection["hostKey"] == HOST_KEY
        assert connection["user"] == "tpu-vllm"
        # pulumi-command's backoff gives fast failures (auth refused until the guest agent
        # has created the user) at least the ~10 minutes docs/secrets-and-access.md promises.
        assert dial_budget_seconds(int(connection["dialErrorLimit"])) >= 600
        assert connection["perDialTimeout"] == PER_DIAL_TIMEOUT_SECONDS
    assert run.outputs["ssh_host_key"] == HOST_KEY
    assert "ssh -i tpu-vllm-" in run.outputs["ssh_command"]
    assert run.outputs["ssh_command"].endswith("tpu-vllm@203.0.113.10")
    assert "ssh_command" not in run.secret_outputs


def test_fetch_reads_the_latest_hf_token_and_this_api_key_version(run: ProgramRun) -> None:
    fetch = next(c for c in run.of_type(COMMAND) if c.name == "secrets-fetch")
    script = fetch.inputs["create"]
    stack = run.outputs["queued_resource"].rsplit("-", 1)[-1]
    assert "\nfetch hf_token test-project hf-token latest\n" in script
    assert f"\nfetch vllm_api_key test-project tpu-vllm-{stack}-api-key 1" in script
    assert script.startswith("set -euo pipefail\n")
    assert "umask 077" in script


def test_unverified_host_key_is_opt_in() -> None:
    strict = run_program("v5e1")
    [key] = [r for r in strict.of_type("pulumi-python:dynamic:Resource") if "node_name" in r.inputs]
    assert key.inputs["allow_unverified"] is False
    relaxed = run_program("v5e1", {"tpu-vllm:access.allowUnverifiedHostKey": True})
    [key] = [
        r for r in relaxed.of_type("pulumi-python:dynamic:Resource") if "node_name" in r.inputs
    ]
    assert key.inputs["allow_unverified"] is True


def test_an_unverified_host_key_leaves_guest_attributes_out_of_the_node_metadata() -> None:
    """`compute.managed.disableGuestAttributesAccess` evaluates the `enable-guest-attributes`
    metadata key (Compute Engine, "Managed constraints"): with the opt-in, which exists for
    projects that enforce it, the node must not ask for them, or the request is refused."""

    def node_metadata(run: ProgramRun) -> dict[str, object]:
        [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
        return dict(qr.inputs["metadata"])

    strict = node_metadata(run_program("v5e1"))
    assert strict["enable-guest-attributes"] == "TRUE"
    relaxed = node_metadata(run_program("v5e1", {"tpu-vllm:access.allowUnverifiedHostKey": True}))
    assert "enable-guest-attributes" not in relaxed
    assert relaxed["enable-oslogin"] == "FALSE"
    assert relaxed["ssh-keys"] == strict["ssh-keys"]
