"""FlexStartTpu: the node's identity, the flex-start queued resource, and who may reach it.
docs/tpu-request.md, "What the stack creates"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.config import (
    AccessSettings,
    MonitoringSettings,
    RenewalSettings,
    StackConfig,
    TpuSettings,
)
from components.naming import resource_id
from components.vm.host_key import NodeHostKey, NodeHostKeyArgs
from components.vm.org_policy import OrgPolicyGate, OrgPolicyGateArgs
from components.vm.queued_resource import QueuedResource, QueuedResourceArgs

SSH_PORT = 22
# A deny from everywhere at 2 beats any allow at 2 or more (lowest number first, deny wins a tie:
# https://cloud.google.com/firewall/docs/firewalls, "Priority"); the ranges' allow at 1 comes
# first. Not 0: the Terraform provider under pulumi-gcp once sent an explicit 0 as the default
# 1000 (hashicorp/terraform-provider-google#3696, fixed by magic-modules#1817); 1 avoids it.
# docs/secrets-and-access.md, "Who can reach the node".
ALLOW_PRIORITY = 1
DENY_PRIORITY = 2
EVERYWHERE = "0.0.0.0/0"
TELEMETRY_ROLES = (
    ("metric-writer", "roles/monitoring.metricWriter"),
    ("log-writer", "roles/logging.logWriter"),
)


def queued_resource_args(
    args: FlexStartTpuArgs,
    *,
    service_account_email: pulumi.Input[str],
    network_tag: str,
    timing: Mapping[str, float] | None = None,
) -> QueuedResourceArgs:
    """The queued resource FlexStartTpu asks for. Tests drive the provider with its `props()`."""
    return QueuedResourceArgs(
        project=args.project,
        stack=args.stack,
        tpu=args.tpu,
        network=args.access.network,
        renewal=args.renewal,
        image=args.image,
        metadata=args.metadata,
        service_account_email=service_account_email,
        network_tag=network_tag,
        timing=dict(timing or {}),
    )


@dataclass(frozen=True, kw_only=True)
class FlexStartTpuArgs:
    """The sections the node reads: the request (`tpu`), who may reach it (`access`), when its
    successor starts (`renewal`), its telemetry (`monitoring`) and the port it serves on."""

    project: str
    stack: str
    tpu: TpuSettings
    access: AccessSettings
    renewal: RenewalSettings
    monitoring: MonitoringSettings
    port: int
    #: `NAME@sha256:...` the node serves (components/image_pin.py); a new one means a new node.
    image: pulumi.Input[str]
    #: Node metadata (SSH public key, guest attributes). Never secrets: metadata is readable
    #: from the VM and by anyone with compute.instances.get.
    metadata: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    #: Google's uptime checkers' addresses (`monitoring.uptimeCheck`), let in to `/health`.
    uptime_ranges: Sequence[str] = ()

    @classmethod
    def of(
        cls,
        config: StackConfig,
        image: pulumi.Input[str],
        metadata: Mapping[str, pulumi.Input[str]] | None = None,
        uptime_ranges: Sequence[str] = (),
    ) -> FlexStartTpuArgs:
        return cls(
            project=config.project,
            stack=config.stack,
            tpu=config.tpu,
            access=config.access,
            renewal=config.renewal,
            monitoring=config.monitoring,
            port=config.vllm.port,
            image=image,
            metadata=dict(metadata or {}),
            uptime_ranges=tuple(uptime_ranges),
        )


class FlexStartTpu(pulumi.ComponentResource):
    """A TPU VM from a flex-start (or spot / on-demand) queued resource, firewalled. One per
    stack: its host key's name is fixed."""

    zone: pulumi.Output[str]
    queued_resource: pulumi.Output[str]
    node: pulumi.Output[str]
    external_ip: pulumi.Output[str | None]
    internal_ip: pulumi.Output[str | None]
    expires_at: pulumi.Output[str | None]
    host_key: pulumi.Output[str | None]
    service_account_email: pulumi.Output[str]

    def __init__(
        self, name: str, args: FlexStartTpuArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:FlexStartTpu", name, None, opts)
        self.network_tag = resource_id(args.stack)
        # Before any TPU is requested: stop if an org policy would make the node unusable.
        self.org_policy_gate = OrgPolicyGate(
            f"{name}-org-policy",
            OrgPolicyGateArgs(
                project=args.project,
                allow_unverified_host_key=args.access.allow_unverified_host_key,
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self.service_account = self._create_service_account(name, args)
        self.service_account_email = self.service_account.email
        qr = QueuedResource(
            f"{name}-qr",
            queued_resource_args(
                args, service_account_email=self.service_account.email, network_tag=self.network_tag
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[self.org_policy_gate]),
        )
        # The node's published SSH host key, which every command's connection pins. Not named
        # `{name}-...`: existing stacks' URNs have it as `node-host-key`.
        self.host_key = NodeHostKey(
            "node-host-key",
            NodeHostKeyArgs(
                node_name=qr.node_name,
                node_create_time=qr.create_time,
                allow_unverified=args.access.allow_unverified_host_key,
            ),
            pulumi.ResourceOptions(parent=self),
        ).host_key
        self._create_firewalls(name, args)
        self.telemetry_grants = self._grant_telemetry(name, args)
        self.zone = qr.zone
        self.queued_resource = qr.qr_name
        self.node = qr.node_name
        self.external_ip = qr.external_ip
        self.internal_ip = qr.internal_ip
        self.expires_at = qr.termination_time
        self.register_outputs(
            {
                "zone": self.zone,
                "queued_resource": self.queued_resource,
                "node": self.node,
                "external_ip": self.external_ip,
                "internal_ip": self.internal_ip,
                "expires_at": self.expires_at,
                "service_account_email": self.service_account_email,
            }
        )

    def _create_service_account(
        self, name: str, args: FlexStartTpuArgs
    ) -> gcp.serviceaccount.Account:
        # A dedicated identity per stack, so the node can be granted exactly one secret.
        return gcp.serviceaccount.Account(
            f"{name}-sa",
            project=args.project,
            account_id=resource_id(args.stack),
            display_name=f"tpu-vllm node ({args.stack})",
            description="Identity of the TPU VM that serves vLLM; reads only its own secrets.",
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _grant_telemetry(self, name: str, args: FlexStartTpuArgs) -> list[gcp.projects.IAMMember]:
        """`monitoring.enabled`: the node's own identity may write metrics (the Ops Agent) and
        log entries (Docker's gcplogs driver), and nothing more (IAM "Monitoring roles",
        "Logging roles"). Grants to this stack's account only, so `pulumi destroy` removing
        them takes nothing from anyone else."""
        if not args.monitoring.enabled:
            return []
        member = self.service_account.email.apply(lambda email: f"serviceAccount:{email}")
        return [
            gcp.projects.IAMMember(
                f"{name}-{what}",
                project=args.project,
                role=role,
                member=member,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for what, role in TELEMETRY_ROLES
        ]

    def _create_firewalls(self, name: str, args: FlexStartTpuArgs) -> list[gcp.compute.Firewall]:
        """Per port: an allow for the configured ranges, and a deny for everyone else.

        The allow alone restricts nothing on a network that already lets the port in (such as
        `default-allow-ssh`); the deny, on this node's tag only, makes the ranges the only way in.
        """
        rules: list[tuple[str, int, Sequence[str]]] = [
            ("serving", args.port, args.access.allowed_cidrs),
            ("ssh", SSH_PORT, args.access.ssh_cidrs),
        ]
        if args.monitoring.uptime_check:
            if not args.uptime_ranges:  # a rule with no source ranges lets everyone in
                raise ValueError("monitoring.uptimeCheck is on but no uptime-check ranges given")
            # Google's uptime checkers, to `/health`; what else they reach without the API key:
            # docs/operations.md "Watch it serve".
            rules.insert(1, ("uptime-check", args.port, args.uptime_ranges))
        firewalls = []
        for what, port, cidrs in rules:
            firewalls.append(self._allow(name, args, what, port, cidrs))
            if what == "uptime-check":
                continue  # the serving port's deny already covers everyone else
            ports = [str(port)]
            firewalls.append(
                gcp.compute.Firewall(
                    f"{name}-{what}-deny",
                    project=args.project,
                    network=args.access.network,
                    direction="INGRESS",
                    priority=DENY_PRIORITY,
                    description=(
                        f"tpu-vllm {args.stack}: {what} port {port} from anywhere else, "
                        "whatever other rules of the network allow"
                    ),
                    source_ranges=[EVERYWHERE],
                    target_tags=[self.network_tag],
                    denies=[gcp.compute.FirewallDenyArgs(protocol="tcp", ports=ports)],
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        return firewalls

    def _allow(
        self, name: str, args: FlexStartTpuArgs, what: str, port: int, cidrs: Sequence[str]
    ) -> gcp.compute.Firewall:
        return gcp.compute.Firewall(
            f"{name}-{what}",
            project=args.project,
            network=args.access.network,
            direction="INGRESS",
            priority=ALLOW_PRIORITY,
            description=f"tpu-vllm {args.stack}: {what} port {port} from its ranges",
            source_ranges=list(cidrs),
            target_tags=[self.network_tag],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(port)])],
            opts=pulumi.ResourceOptions(parent=self),
        )
