"""Secret Manager access for the node: the HF token it reads, and the API key it serves with.

The program never reads the HF token's value: it checks the secret exists and grants the node's
service account that one secret. The API key is generated per stack and stored as a Secret
Manager version; the VM copies both onto the node (components/vm/secrets_fetch.py), GKE mounts
them. Who reads what: docs/secrets-and-access.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

from components.config import AccessSettings, StackConfig
from components.naming import resource_id, stack_labels

ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"


def require_hf_token_secret(config: StackConfig) -> None:
    """Fail, at preview too (an invoke), if the HF token secret does not exist."""
    secret_id = config.access.hf_token_secret
    try:
        gcp.secretmanager.get_secret(project=config.project, secret_id=secret_id)
    except Exception as error:  # noqa: BLE001 - the SDK raises a plain Exception for invokes
        raise pulumi.RunError(
            f"tpu-vllm:access.hfTokenSecret = {secret_id!r}: Secret Manager secret "
            f"projects/{config.project}/secrets/{secret_id} was not found or cannot be read "
            f"({error}). Fix: store your Hugging Face token once with "
            f"`.venv/bin/python -m scripts.save_hf_token --stack {config.stack}` (it reads the "
            "token from stdin or a hidden prompt), then run pulumi again."
        ) from None


@dataclass(frozen=True, kw_only=True)
class NodeSecretsArgs:
    """What the secrets read: the project, the stack's name and the `access` section."""

    project: str
    stack: str
    access: AccessSettings
    service_account_email: pulumi.Input[str]

    @classmethod
    def of(cls, config: StackConfig, service_account_email: pulumi.Input[str]) -> NodeSecretsArgs:
        return cls(
            project=config.project,
            stack=config.stack,
            access=config.access,
            service_account_email=service_account_email,
        )


class NodeSecrets(pulumi.ComponentResource):
    """The grants and the per-stack API key (the VM adds its fetch of both as a child)."""

    api_key: pulumi.Output[str]
    api_key_secret: pulumi.Output[str]
    #: `projects/P/secrets/S/versions/N` (its number changes on rotation).
    api_key_version: pulumi.Output[str]
    #: Who may read both secrets: the fetch (VM) or the pods (GKE) wait for them.
    grants: list[gcp.secretmanager.SecretIamMember]
    #: Where the readers find them: the project, and each secret's id in it.
    project: str
    hf_token_secret_id: str
    api_key_secret_id: str

    def __init__(
        self, name: str, args: NodeSecretsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:NodeSecrets", name, None, opts)
        self.project = args.project
        self.hf_token_secret_id = args.access.hf_token_secret
        self.api_key_secret_id = resource_id(args.stack, "-api-key")
        child = pulumi.ResourceOptions(parent=self)
        member = pulumi.Output.from_input(args.service_account_email).apply(
            lambda email: f"serviceAccount:{email}"
        )
        hf_access = gcp.secretmanager.SecretIamMember(
            f"{name}-hf-token-access",
            project=args.project,
            secret_id=self.hf_token_secret_id,
            role=ACCESSOR_ROLE,
            member=member,
            opts=child,
        )
        password = random.RandomPassword(f"{name}-api-key", length=48, special=False, opts=child)
        self.api_key = pulumi.Output.secret(password.result)
        key_secret = gcp.secretmanager.Secret(
            f"{name}-api-key-secret",
            project=args.project,
            secret_id=self.api_key_secret_id,
            labels=stack_labels(args.stack),
            replication=gcp.secretmanager.SecretReplicationArgs(
                auto=gcp.secretmanager.SecretReplicationAutoArgs()
            ),
            opts=child,
        )
        key_version = gcp.secretmanager.SecretVersion(
            f"{name}-api-key-version",
            secret=key_secret.id,
            secret_data=self.api_key,
            opts=child,
        )
        key_access = gcp.secretmanager.SecretIamMember(
            f"{name}-api-key-access",
            project=args.project,
            secret_id=key_secret.secret_id,
            role=ACCESSOR_ROLE,
            member=member,
            opts=child,
        )
        self.api_key_secret = key_secret.name
        self.api_key_version = key_version.name
        self.grants = [hf_access, key_access]
        self.register_outputs({"api_key_secret": self.api_key_secret})
