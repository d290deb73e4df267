"""gcp stand-in: Compute Engine (`compute.Firewall`, `compute.Address`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/compute/
resource_compute_firewall.go` and `resource_compute_address.go`, as pulumi-gcp 10.2.0 bridges
them (a missing `name` autonamed, `provider/resources.go` `SetAutonaming(255, "-")`):
- Firewall: ForceNew `name` (`verify.ValidateGCEName`), `direction` (INGRESS | EGRESS, computed:
  the API defaults INGRESS), `params`, `project`; `network` (a name or self link,
  `CompareSelfLinkOrResourceName`), ranges, tags, `allow`/`deny` (ExactlyOneOf, sets),
  `priority` (0-65535, default 1000) update in place (PATCH); id
  `projects/{project}/global/firewalls/{name}`, `selfLink`
  `https://www.googleapis.com/compute/v1/projects/{project}/global/firewalls/{name}`, `network`
  read back as the network's v1 self link;
- Address: every input ForceNew except `labels`; `address_type` EXTERNAL | INTERNAL (default
  EXTERNAL), `network_tier` PREMIUM | STANDARD (the API's default PREMIUM), `ip_version`
  IPV4 | IPV6; id `projects/{project}/regions/{region}/addresses/{name}`, `selfLink` on
  `https://www.googleapis.com/compute/v1/`. An external address here is drawn from
  198.51.100.0/24 (RFC 5737 TEST-NET-2), an internal one from 10.128.0.0/20, unique in the store.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import secrets
from typing import Any

from tests.support.standins.gcp_common import insert_new, label_outputs, not_found, read_stored
from tests.support.standins.kinds import Context, Kind, enum_failure, fixed, last_segment
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import UNKNOWN, Plain

COMPUTE_V1 = "https://www.googleapis.com/compute/v1/"
_GCE_NAME = r"^(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$"
_POOLS = {"EXTERNAL": "198.51.100.0/24", "INTERNAL": "10.128.0.0/20"}


def creation_timestamp() -> str:
    """Compute Engine's `creationTimestamp`: RFC 3339 in Pacific time, milliseconds."""
    stamp = datetime.datetime.now(datetime.timezone(datetime.timedelta(hours=-7)))
    return stamp.isoformat(timespec="milliseconds")


def gce_name(inputs: Plain, prop: str = "name") -> list[Failure]:
    value = inputs.get(prop)
    if isinstance(value, str) and value != UNKNOWN and not re.match(_GCE_NAME, value):
        return [Failure(prop, f'"{prop}" ("{value}") doesn\'t match regexp "{_GCE_NAME}"')]
    return []


def network_link(project: str, network: str) -> str:
    if network.startswith(COMPUTE_V1):
        return network
    if network.startswith("projects/"):
        return COMPUTE_V1 + network
    return f"{COMPUTE_V1}projects/{project}/global/networks/{network}"


class Firewall(Kind):
    token = "gcp:compute/firewall:Firewall"
    replace_on = frozenset(["name", "direction", "params", "project"])
    computed = frozenset(
        ["project", "direction", "destinationRanges", "enableLogging", "deletionPolicy"]
    )
    from_provider = fixed(project="project")
    unordered = frozenset(
        [
            "allows",
            "denies",
            "sourceRanges",
            "sourceTags",
            "targetTags",
            "sourceServiceAccounts",
            "targetServiceAccounts",
            "destinationRanges",
        ]
    )
    defaults = fixed(priority=1000)
    autoname = ("name", 255)

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "network":
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = gce_name(inputs) + enum_failure(inputs, "direction", ["INGRESS", "EGRESS", ""])
        priority = inputs.get("priority")
        if isinstance(priority, int | float) and not 0 <= priority <= 65535:
            failures.append(
                Failure(
                    "priority",
                    f"expected priority to be in the range (0 - 65535), got {int(priority)}",
                )
            )
        rules = [k for k in ("allows", "denies") if inputs.get(k)]
        if len(rules) != 1:
            failures.append(
                Failure(
                    "allows",
                    f'"allow": one of `allow,deny` must be specified, {len(rules)} were',
                )
            )
        if inputs.get("sourceServiceAccounts") and (
            inputs.get("sourceTags") or inputs.get("targetTags")
        ):
            failures.append(
                Failure(
                    "sourceServiceAccounts",
                    '"source_service_accounts": conflicts with source_tags / target_tags',
                )
            )
        return failures

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        path = f"projects/{project}/global/firewalls/{inputs['name']}"
        outputs = {
            **inputs,
            "project": project,
            "network": network_link(project, inputs["network"]),
            "direction": inputs.get("direction") or "INGRESS",
            "destinationRanges": inputs.get("destinationRanges") or [],
            "selfLink": COMPUTE_V1 + path,
            "creationTimestamp": creation_timestamp(),
            "disabled": bool(inputs.get("disabled")),
        }
        insert_new(Store("compute_firewalls"), path, outputs)
        return path, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored("compute_firewalls", resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store("compute_firewalls")
        if store.get(resource_id) is None:
            raise not_found(f"The resource '{resource_id}'")
        outputs = {**olds, **news, "project": olds["project"], "direction": olds["direction"]}
        outputs["network"] = network_link(olds["project"], news["network"])
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionPolicy") != "ABANDON":
            Store("compute_firewalls").delete(resource_id)


class Address(Kind):
    token = "gcp:compute/address:Address"
    replace_on = frozenset(
        [
            "name",
            "address",
            "addressType",
            "description",
            "ipCollection",
            "ipVersion",
            "ipv6EndpointType",
            "network",
            "networkTier",
            "prefixLength",
            "purpose",
            "region",
            "subnetwork",
            "project",
        ]
    )
    computed = frozenset(
        [
            "address",
            "networkTier",
            "prefixLength",
            "purpose",
            "region",
            "subnetwork",
            "project",
            "deletionPolicy",
        ]
    )
    from_provider = fixed(project="project", region="region")
    defaults = fixed(addressType="EXTERNAL")
    autoname = ("name", 255)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        return (
            gce_name(inputs)
            + enum_failure(inputs, "addressType", ["INTERNAL", "EXTERNAL", ""])
            + enum_failure(inputs, "networkTier", ["PREMIUM", "STANDARD", ""])
            + enum_failure(inputs, "ipVersion", ["IPV4", "IPV6", ""])
            + enum_failure(inputs, "ipv6EndpointType", ["VM", "NETLB", ""])
        )

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project, region = ctx.project(inputs), ctx.region(inputs)
        path = f"projects/{project}/regions/{region}/addresses/{inputs['name']}"
        store = Store("compute_addresses")
        kind = inputs.get("addressType") or "EXTERNAL"
        taken = {a["address"] for a in store.all().values()}
        address = inputs.get("address") or next(
            str(ip) for ip in ipaddress.ip_network(_POOLS[kind]).hosts() if str(ip) not in taken
        )
        outputs = {
            **inputs,
            **label_outputs(inputs),
            "project": project,
            "region": region,
            "address": address,
            "addressType": kind,
            "networkTier": inputs.get("networkTier") or "PREMIUM",
            "purpose": inputs.get("purpose") or ("" if kind == "EXTERNAL" else "GCE_ENDPOINT"),
            "prefixLength": 0,
            "selfLink": COMPUTE_V1 + path,
            "creationTimestamp": creation_timestamp(),
            "addressId": str(secrets.randbelow(10**19)),
            "labelFingerprint": secrets.token_urlsafe(8),
            "users": [],
        }
        insert_new(store, path, outputs)
        return path, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored("compute_addresses", resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store("compute_addresses")
        if store.get(resource_id) is None:
            raise not_found(f"The resource '{resource_id}'")
        outputs = {**olds, "labels": news.get("labels"), **label_outputs(news)}
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionPolicy") != "ABANDON":
            Store("compute_addresses").delete(resource_id)
