"""A stable name for the endpoint: one Cloud DNS A record that follows the node's address.

Every renewal brings a new VM with a new external IP (a TPU-API VM cannot take a reserved
address), so with `dns.managedZone` the stack keeps `NAME.ZONE_DNS_NAME` pointing at the current
node, updated in place. Details: docs/renewal.md, "A stable name (VM backend)".
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.config import NAMESPACE, DnsSettings, StackConfig
from components.renewal import RECORD_TTL_SECONDS

RECORD_TYPE = "A"


@dataclass(frozen=True)
class ManagedZone:
    name: str
    #: Fully qualified, with the trailing dot: `models.example.com.`.
    dns_name: str
    visibility: str


def require_managed_zone(config: StackConfig) -> ManagedZone | None:
    """Look up `dns.managedZone` (an invoke: it runs at preview too), so a missing or unreadable
    zone stops the run before a TPU is requested; None when no name is configured."""
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
    return f"{dns.name}.{zone_dns_name}"


@dataclass(frozen=True, kw_only=True)
class EndpointNameArgs:
    """What the record reads: the project, the `dns` section, its zone and the address."""

    project: str
    dns: DnsSettings
    zone: ManagedZone
    #: The node's (or the load balancer's) external IP; None or "" while it has none.
    address: pulumi.Input[str | None]


class EndpointName(pulumi.ComponentResource):
    """An A record (TTL 60) for the node's external IP; renewals update it in place."""

    hostname: pulumi.Output[str]

    def __init__(
        self, name: str, args: EndpointNameArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:EndpointName", name, None, opts)
        zone = args.zone
        self.record = gcp.dns.RecordSet(
            f"{name}-a",
            project=args.project,
            managed_zone=zone.name,
            name=record_name(args.dns, zone.dns_name),
            type=RECORD_TYPE,
            ttl=RECORD_TTL_SECONDS,
            rrdatas=pulumi.Output.from_input(args.address).apply(
                lambda ip: record_data(ip, args.project, args.dns, zone)
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.hostname = self.record.name.apply(lambda fqdn: fqdn.rstrip("."))
        self.register_outputs({"hostname": self.hostname})


def record_data(
    address: str | None, project: str, dns: DnsSettings, zone: ManagedZone
) -> list[str]:
    """The record's `rrdatas`: the node's address, or, while it has none, the data Cloud DNS
    holds now. Never `[]`, which the provider refuses (`rrdatas` and `routing_policy` are
    `ExactlyOneOf` in terraform-provider-google's resource_dns_record_set.go); a node without an
    address is usually a moment between two nodes, so keeping the last one is right.
    """
    if address:
        return [address]
    fqdn = record_name(dns, zone.dns_name)
    try:
        current = gcp.dns.get_record_set(
            managed_zone=zone.name, name=fqdn, type=RECORD_TYPE, project=project
        )
        kept = [str(value) for value in (current.rrdatas or []) if value]
    except Exception:  # noqa: BLE001 - the data source fails when the record does not exist
        kept = []
    if kept:
        pulumi.log.warn(
            f"the node has no external address at the moment: the DNS record {fqdn} keeps "
            f"its last data {kept} instead of being emptied; the next `pulumi up` after the "
            "node has an address moves it."
        )
        return kept
    raise pulumi.RunError(
        f"{NAMESPACE}:dns.managedZone = {zone.name!r}: the node has no external address at "
        f"the moment and {fqdn} has no record yet, so there is nothing to point it at (Cloud "
        "DNS takes no A record without an address); nothing was written to the zone. Fix: "
        "run `pulumi refresh`, then `pulumi up` once the node is ACTIVE (its `external_ip` "
        "output names the address)."
    )
