"""The VM's secrets fetch: the HF token and the API key from Secret Manager into 0600 files on
the node, with the VM's own identity. A child of the shared `NodeSecrets`, so its URN is kept.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components.remote_scripts import API_KEY_FILE, HEADER, HF_TOKEN_FILE, version_of
from components.secrets import NodeSecrets
from components.vm.node_command import node_command
from components.vm.node_scripts import fill, template

#: Seconds the VM keeps retrying while a fresh IAM grant reaches Secret Manager.
SECRET_ACCESS_DEADLINE = 600


@dataclass(frozen=True)
class SecretFile:
    name: str
    project: str
    secret: str
    version: str = "latest"


def fetch_secrets_script(files: Sequence[SecretFile]) -> str:
    fetches = "\n".join(
        " ".join(["fetch", *(shlex.quote(v) for v in (f.name, f.project, f.secret, f.version))])
        for f in files
    )
    return HEADER + fill(
        template("fetch_secrets.sh"),
        {"DEADLINE": str(SECRET_ACCESS_DEADLINE), "FETCHES": fetches},
    )


def fetch_secrets(
    secrets: NodeSecrets, connection: command.remote.ConnectionArgs
) -> command.remote.Command:
    hf_secret = SecretFile(HF_TOKEN_FILE, secrets.project, secrets.hf_token_secret_id)
    script = secrets.api_key_version.apply(
        lambda version: fetch_secrets_script(
            [
                hf_secret,
                SecretFile(
                    API_KEY_FILE,
                    secrets.project,
                    secrets.api_key_secret_id,
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
