"""SSH identity for the node: a per-stack key, its metadata, and a verified connection.

The private key exists only as a Pulumi secret; the node's host key, read through the TPU API,
is pinned, so the commands that handle secrets never talk to an impostor.
"""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_tls as tls

from components.ssh_dial import DIAL_ERROR_LIMIT, PER_DIAL_TIMEOUT_SECONDS

SSH_USER = "tpu-vllm"


class SshIdentity(pulumi.ComponentResource):
    """An ED25519 key pair for the dedicated user, and the node metadata that installs it."""

    public_key_openssh: pulumi.Output[str]
    private_key_openssh: pulumi.Output[str]

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-vllm:index:SshIdentity", name, None, opts)
        self.key = tls.PrivateKey(
            f"{name}-key", algorithm="ED25519", opts=pulumi.ResourceOptions(parent=self)
        )
        self.public_key_openssh = self.key.public_key_openssh.apply(lambda key: (key or "").strip())
        self.private_key_openssh = pulumi.Output.secret(self.key.private_key_openssh)
        self.register_outputs({"public_key_openssh": self.public_key_openssh})

    def metadata(self, *, publish_host_key: bool) -> dict[str, pulumi.Input[str]]:
        """The login key, OS Login off (else the guest agent creates no user from `ssh-keys`:
        guest-agent `oslogin.go`), and guest attributes unless the host key goes unverified
        (the managed constraint evaluates that key): docs/secrets-and-access.md, "SSH"."""
        metadata: dict[str, pulumi.Input[str]] = {
            "ssh-keys": self.public_key_openssh.apply(lambda key: f"{SSH_USER}:{key} {SSH_USER}"),
        }
        if publish_host_key:
            metadata["enable-guest-attributes"] = "TRUE"
        metadata["enable-oslogin"] = "FALSE"
        return metadata

    def connection(
        self, host: pulumi.Input[str | None], host_key: pulumi.Input[str | None]
    ) -> command.remote.ConnectionArgs:
        return command.remote.ConnectionArgs(
            host=host,  # type: ignore[arg-type]  # None only before the node exists
            user=SSH_USER,
            private_key=self.private_key_openssh,
            host_key=host_key,  # type: ignore[arg-type]
            dial_error_limit=DIAL_ERROR_LIMIT,
            per_dial_timeout=PER_DIAL_TIMEOUT_SECONDS,
        )


def ssh_command(stack: str, host: pulumi.Input[str | None]) -> pulumi.Output[str]:
    """The operator's way in, with the key taken from the stack's secret output."""
    key_file = f"tpu-vllm-{stack}.key"
    return pulumi.Output.from_input(host).apply(
        lambda ip: (
            f"pulumi stack output ssh_private_key --show-secrets -s {stack} > {key_file} && "
            f"chmod 600 {key_file} && ssh -i {key_file} {SSH_USER}@{ip or 'NODE-IP'}"
        )
    )
