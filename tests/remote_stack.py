"""The exact command texts the program hands to `remote.Command`, taken from a mocked run.

Tests over real SSH run these texts, not a re-rendering, so what they prove holds for what
`pulumi up` would send. Outputs that only exist after a command ran (the container id that
`vllm-start` prints, the API key version's name) are fed back through the mocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulumi.runtime import mocks

from tests.fakes.metadata_server import FakeMetadataServer
from tests.fakes.secret_manager import FakeSecretManager
from tests.fakes.ssh_host import SshHost
from tests.mock_outputs import cloud_outputs
from tests.pulumi_program import TEST_PROJECT, run_program

IMAGE = "vllm/vllm-tpu:nightly"
START = "vllm-start"
READY = "vllm-ready"
FETCH = "secrets-fetch"


def commands(
    stack: str,
    changes: Mapping[str, Any] | None = None,
    *,
    start_stdout: str | None = None,
    api_key_version: str | None = None,
) -> dict[str, str]:
    """`{command name: create text}` for the stack, with real outputs substituted."""

    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = cloud_outputs(args)
        if args.typ == "command:remote:Command" and args.name == START and start_stdout:
            result["stdout"] = start_stdout
        if args.typ == "gcp:secretmanager/secretVersion:SecretVersion" and api_key_version:
            result["name"] = api_key_version
        return result

    run = run_program(stack, changes, outputs_for=outputs)
    return {r.name: str(r.inputs["create"]) for r in run.of_type("command:remote:Command")}


def node_with_secrets(
    start_host: Callable[..., SshHost],
    secret_manager: FakeSecretManager,
    metadata: FakeMetadataServer,
    *,
    hf_token: bytes,
    api_key: bytes,
) -> tuple[SshHost, str]:
    """An SSH "TPU VM" whose identity can read an HF token and an API key in Secret Manager.

    Returns the host and the API key version's name (what the program's fetch command names).
    """
    secret_manager.add_version(TEST_PROJECT, "hf-token", hf_token)
    version = secret_manager.add_version(TEST_PROJECT, "tpu-vllm-v5e1-api-key", api_key)
    metadata.access_token = secret_manager.token
    host = start_host(
        env={"GCE_METADATA_HOST": metadata.host, "SECRET_MANAGER_API_ENDPOINT": secret_manager.url},
        images_present=[IMAGE],
    )
    return host, version
