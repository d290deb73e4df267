"""The VM's secrets fetch: one `remote.Command` that copies the HF token and the API key from
Secret Manager into 0600 files on the node, with the VM's own identity.

It is a child of the shared `NodeSecrets` (components/secrets.py), as it always was, so its URN
is unchanged; only the VM builds it (on GKE the pods mount the secrets instead).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components.config import StackConfig
from components.naming import resource_id
from components.remote_scripts import API_KEY_FILE, HEADER, HF_TOKEN_FILE, version_of
from components.secrets import NodeSecrets
from components.vm.node_command import node_command
from components.vm.node_scripts import fill, template

#: Seconds the VM keeps retrying while a fresh IAM grant reaches Secret Manager.
SECRET_ACCESS_DEADLINE = 600


@dataclass(frozen=True)
class SecretFile:
    """One Secret Manager version the node copies into ~/.tpu-vllm/secrets/NAME."""

    name: str
    project: str
    secret: str
    version: str = "latest"


def fetch_secrets_script(files: Sequence[SecretFile]) -> str:
    """Copy each version into ~/.tpu-vllm/secrets with mode 0600, as the VM itself."""
    fetches = "\n".join(
        " ".join(["fetch", *(shlex.quote(v) for v in (f.name, f.project, f.secret, f.version))])
        for f in files
    )
    return HEADER + fill(
        template("fetch_secrets.sh"),
        {"DEADLINE": str(SECRET_ACCESS_DEADLINE), "FETCHES": fetches},
    )


def fetch_secrets(
    secrets: NodeSecrets, config: StackConfig, connection: command.remote.ConnectionArgs
) -> command.remote.Command:
    """`NAME-fetch` under `secrets`: the latest HF token and this API key version onto the VM,
    after the grants that let the VM read them."""
    hf_secret = SecretFile(HF_TOKEN_FILE, config.project, config.access.hf_token_secret)
    script = secrets.api_key_version.apply(
        lambda version: fetch_secrets_script(
            [
                hf_secret,
                SecretFile(
                    API_KEY_FILE,
                    config.project,
                    resource_id(config.stack, "-api-key"),
                    # The version number puts a rotated key into the script's text, so Pulumi
                    # re-runs the fetch (and restarts the server) when it changes.
                    version_of(version),
                ),
            ]
        )
    )
    return node_command(
        f"{secrets.pulumi_resource_name}-fetch",
        connection,
        script,
        pulumi.ResourceOptions(parent=secrets, depends_on=secrets.grants),
    )
