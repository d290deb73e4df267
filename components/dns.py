"""A stable name for the endpoint: one Cloud DNS A record that follows the node's address.

A flex-start TPU VM lives at most `maxRunDuration`, and every renewal brings a new VM with a new
external IP (a TPU-API VM cannot take a reserved static address). Clients should not have to
learn each new IP, so when `dns.managedZone` is set the stack keeps `NAME.ZONE_DNS_NAME`
pointing at the current node. The record's name never changes, so a renewal updates its data in
place. The TTL is short (60 s) so resolvers drop the old address soon after a renewal.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.config import NAMESPACE, DnsSettings, StackConfig
from components.renewal import RECORD_TTL_SECONDS


@dataclass(frozen=True)
class ManagedZone:
    """What the program needs from the zone the record goes into."""

    name: str
    #: Fully qualified, with the trailing dot: `models.example.com.`.
    dns_name: str
    visibility: str


def require_managed_zone(config: StackConfig) -> ManagedZone | None:
    """Look up `dns.managedZone` before anything is created; None when no name is configured.

    `gcp.dns.get_managed_zone` is an invoke, which Pulumi runs at preview too, so a missing
    zone (or one the deployer may not read) stops the run before a TPU is requested.
    """
    if config.dns is None:
        return None
    dns = config.dns
    key = f"{NAMESPACE}:dns.managedZone"
    fix = (
        f"Fix: use the NAME of a zone listed by `gcloud dns managed-zones list --project "
        f"{config.project}`, create one (`gcloud dns managed-zones create {dns.managed_zone} "
        f"--dns-name=YOUR.DOMAIN. --description='tpu-vllm endpoints' --project "
        f"{config.project}`), give the deployer roles/dns.admin on the project (it reads the "
        "zone and writes the record), or remove the key to serve on the bare IP."
    )
    try:
        zone = gcp.dns.get_managed_zone(name=dns.managed_zone, project=config.project)
    except Exception as error:  # noqa: BLE001 - the SDK raises a plain Exception for invokes
        raise pulumi.RunError(
            f"{key} = {dns.managed_zone!r}: the Cloud DNS managed zone "
            f"projects/{config.project}/managedZones/{dns.managed_zone} was not found or cannot "
            f"be read ({error}); nothing was created. {fix}"
        ) from None
    if not zone.dns_name:
        raise pulumi.RunError(
            f"{key} = {dns.managed_zone!r}: the lookup of the managed zone returned no DNS name; "
            f"nothing was created. {fix}"
        )
    dns_name = zone.dns_name if zone.dns_name.endswith(".") else f"{zone.dns_name}."
    visibility = str(zone.visibility or "public")
    if visibility != "public":
        pulumi.log.warn(
            f"{key} = {dns.managed_zone!r} is a {visibility} zone: only the VPC networks it is "
            f"attached to can resolve {record_name(dns, dns_name)}; clients elsewhere need the "
            "endpoint_ip output or a public zone."
        )
    return ManagedZone(name=dns.managed_zone, dns_name=dns_name, visibility=visibility)


def record_name(dns: DnsSettings, zone_dns_name: str) -> str:
    """The record's fully qualified name, `NAME.ZONE_DNS_NAME` (with the trailing dot)."""
    return f"{dns.name}.{zone_dns_name}"


class EndpointName(pulumi.ComponentResource):
    """An A record (TTL 60) for the node's external IP; renewals update it in place."""

    hostname: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        config: StackConfig,
        zone: ManagedZone,
        address: pulumi.Input[str | None],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("tpu-vllm:index:EndpointName", name, None, opts)
        assert config.dns is not None
        self.record = gcp.dns.RecordSet(
            f"{name}-a",
            project=config.project,
            managed_zone=zone.name,
            name=record_name(config.dns, zone.dns_name),
            type="A",
            ttl=RECORD_TTL_SECONDS,
            # Only the data follows the node: a new IP is an in-place update of the record.
            rrdatas=pulumi.Output.from_input(address).apply(lambda ip: [ip] if ip else []),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # The name clients use, without the root dot; it exists once the record does.
        self.hostname = self.record.name.apply(lambda fqdn: fqdn.rstrip("."))
        self.register_outputs({"hostname": self.hostname})
