"""StackMonitoring: the stack's dashboard, its uptime check on /health, and its alert policies.

Declared as resources, so `pulumi preview` shows them and `pulumi destroy` removes them. Their
bodies are built in components/monitoring_bodies.py; this module registers them as
`tpu-vllm:monitoring` asks (docs/operations.md, "Watch it serve").
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import monitoring_bodies as bodies
from components.config import Backend, MonitoringSettings
from components.vllm_metrics import Queries


def uptime_source_ranges() -> list[str]:
    """Google's uptime-check addresses as IPv4 /32 ranges (an invoke: runs at preview); IPv6
    ones are left out, since the endpoint serves IPv4 only and a rule takes one version."""
    found = gcp.monitoring.get_uptime_check_i_ps()
    ranges = set()
    for ip in found.uptime_check_ips or []:
        try:
            address = ipaddress.ip_address(ip.ip_address)
        except ValueError:
            continue
        if address.version == 4:
            ranges.add(f"{address}/32")
    if not ranges:
        # A firewall rule without source ranges would let everyone in: never create one.
        raise pulumi.RunError(
            "tpu-vllm:monitoring.uptimeCheck = true: Google's uptime-check addresses "
            "(getUptimeCheckIPs) came back without one IPv4 address, so the serving port cannot "
            "be opened to them alone. Fix: check that the Monitoring API is enabled "
            "(`gcloud services enable monitoring.googleapis.com`) and retry, or set "
            "tpu-vllm:monitoring.uptimeCheck to false."
        )
    return sorted(ranges, key=ipaddress.ip_network)


def dashboard_url(project: str, dashboard_id: str) -> str:
    return (
        f"https://console.cloud.google.com/monitoring/dashboards/builder/"
        f"{dashboard_id.rsplit('/', 1)[-1]}?project={project}"
    )


@dataclass(frozen=True, kw_only=True)
class StackMonitoringArgs:
    """What the dashboard, the uptime check and the alerts read: the project, the stack's name,
    the `monitoring` section and the server's port, and what the backend knows."""

    project: str
    stack: str
    monitoring: MonitoringSettings
    port: int
    backend: Backend
    queries: Queries
    #: What the uptime check asks: the endpoint's host (IP or DNS name).
    host: pulumi.Input[str]
    #: GKE: the stack's namespace (TPU metrics per container); None on the VM backend.
    namespace: str | None = None
    #: VM: every node id the stack's TPU may have (the renewal pair); the TPU tiles pick them.
    tpu_nodes: Sequence[str] = ()
    #: The readiness check: the uptime check and the alert policies are created only once the
    #: endpoint serves (a policy made earlier fires "down" during every cold start).
    after: Sequence[pulumi.Resource] = field(default_factory=list)


class StackMonitoring(pulumi.ComponentResource):
    """Dashboard, uptime check and alert policies of one stack."""

    dashboard_url: pulumi.Output[str]
    #: `projects/P/uptimeCheckConfigs/ID`, "" when there is no uptime check.
    uptime_check: pulumi.Output[str]

    def __init__(
        self, name: str, args: StackMonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:StackMonitoring", name, None, opts)
        settings = args.monitoring
        child = pulumi.ResourceOptions(parent=self)
        after_ready = pulumi.ResourceOptions(parent=self, depends_on=list(args.after))
        self.uptime: gcp.monitoring.UptimeCheckConfig | None = None
        check_id: pulumi.Output[str | None] = pulumi.Output.from_input(None)
        if settings.uptime_check:
            body = pulumi.Output.from_input(args.host).apply(
                lambda host: bodies.uptime_check(args.stack, args.project, host, args.port)
            )
            self.uptime = gcp.monitoring.UptimeCheckConfig(
                f"{name}-uptime-check",
                project=args.project,
                **_args_of(body, bodies.uptime_check(args.stack, args.project, "HOST", 1)),
                opts=after_ready,
            )
            check_id = self.uptime.uptime_check_id
        self.uptime_check = (
            self.uptime.name if self.uptime is not None else pulumi.Output.from_input("")
        )

        def watch(check: str | None) -> bodies.Watch:
            return bodies.Watch(
                args.stack,
                args.backend,
                args.queries,
                args.namespace,
                check,
                tuple(args.tpu_nodes),
            )

        self.dashboard: gcp.monitoring.Dashboard | None = None
        self.dashboard_url = pulumi.Output.from_input("")
        if settings.enabled:
            self.dashboard = gcp.monitoring.Dashboard(
                f"{name}-dashboard",
                project=args.project,
                # One field a line: a preview's diff shows the tile that changed.
                dashboard_json=check_id.apply(
                    lambda check: json.dumps(
                        bodies.dashboard(watch(check)), sort_keys=True, indent=1
                    )
                ),
                opts=child,
            )
            self.dashboard_url = self.dashboard.id.apply(
                lambda dashboard_id: dashboard_url(args.project, dashboard_id or "")
            )
        self.alert_policies: list[gcp.monitoring.AlertPolicy] = []
        if settings.alerts:
            # The policy set is the same whatever the check id: only the query text waits on it.
            for short in bodies.alert_policies(watch(None), settings.notification_channels):

                def policy(check: str | None, short: str = short) -> dict[str, Any]:
                    return bodies.alert_policies(watch(check), settings.notification_channels)[
                        short
                    ]

                body = check_id.apply(policy)
                example = bodies.alert_policies(watch(None), settings.notification_channels)[short]
                self.alert_policies.append(
                    gcp.monitoring.AlertPolicy(
                        f"{name}-alert-{short}",
                        project=args.project,
                        **_args_of(body, example),
                        # Made earlier, endpoint-down would page during the first cold start.
                        opts=after_ready,
                    )
                )
        self.register_outputs(
            {"dashboard_url": self.dashboard_url, "uptime_check": self.uptime_check}
        )


def _args_of(body: pulumi.Output[dict[str, Any]], example: dict[str, Any]) -> dict[str, Any]:
    """pulumi-gcp keyword arguments, each an Output of its part of the REST body (`example`
    gives the field names, known before the Output resolves)."""

    def part(key: str) -> pulumi.Output[Any]:
        return body.apply(lambda b: bodies.pulumi_args(b)[key])

    return {key: part(key) for key in bodies.pulumi_args(example)}
