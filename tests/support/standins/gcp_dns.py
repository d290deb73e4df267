"""gcp stand-in: Cloud DNS (`dns.RecordSet`, `getManagedZone`, `getRecordSet`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/dns/
resource_dns_record_set.go`, `data_source_dns_managed_zone.go` and `data_source_dns_record_set.go`:
- RecordSet: ForceNew `managed_zone` (a name or self link), `name` (must end with a dot,
  `validateRecordNameTrailingDot`), `project`; `type`, `ttl`, `rrdatas` update in place;
  `rrdatas` and `routing_policy` ExactlyOneOf (an empty `rrdatas` is none); `rrdatas` compared
  without order (`rrdatasDnsDiffSuppress`); id
  `projects/{p}/managedZones/{zone}/rrsets/{name}/{type}`;
- getManagedZone: the zone's `dnsName`, `visibility`, `nameServers`, `managedZoneId`,
  `description`; the API's 404 when it does not exist;
- getRecordSet: exactly one record set or "Only expected 1 record set, got N".

Managed zones are made by hand (`gcloud dns managed-zones create`), never by the program: tests
seed them with `seed_zone`. The 404 and 400 wordings are plausible, not copied from the API.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from tests.support.standins.gcp_common import read_stored
from tests.support.standins.kinds import ApiError, Context, Function, Kind, fixed, last_segment
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import UNKNOWN, Plain

ZONES = "dns_managed_zones"
RECORDS = "dns_record_sets"


def seed_zone(
    root: Path, project: str, name: str, dns_name: str, visibility: str = "public"
) -> None:
    """A managed zone as `gcloud dns managed-zones create` leaves it (for tests)."""
    Store(ZONES, root).put(
        f"projects/{project}/managedZones/{name}",
        {
            "name": name,
            "dnsName": dns_name,
            "visibility": visibility,
            "description": "",
            "id": str(secrets.randbelow(10**18)),
            "nameServers": [f"ns-cloud-a{i}.googledomains.com." for i in range(1, 5)],
        },
    )


def zone(project: str, name: str) -> Plain:
    found: Plain | None = Store(ZONES).get(f"projects/{project}/managedZones/{last_segment(name)}")
    if found is None:
        raise ApiError(
            f"googleapi: Error 404: The 'parameters.managedZone' resource named "
            f"'{last_segment(name)}' does not exist., notFound"
        )
    return found


class RecordSet(Kind):
    token = "gcp:dns/recordSet:RecordSet"
    replace_on = frozenset(["managedZone", "name", "project"])
    computed = frozenset(["project", "deletionPolicy"])
    from_provider = fixed(project="project")
    unordered = frozenset(["rrdatas"])

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "managedZone":
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = []
        name = inputs.get("name")
        if isinstance(name, str) and name != UNKNOWN and not name.endswith("."):
            failures.append(
                Failure(
                    "name",
                    f'"name" ("{name}") doesn\'t end with ".", name field must end with trailing '
                    "dot, for example test.example.com. (note the trailing dot)",
                )
            )
        given = [k for k in ("rrdatas", "routingPolicy") if inputs.get(k)]
        if len(given) != 1:
            failures.append(
                Failure(
                    "rrdatas",
                    f'"rrdatas": one of `routing_policy,rrdatas` must be specified, '
                    f"{len(given)} were",
                )
            )
        return failures

    def _key(self, project: str, inputs: Plain) -> str:
        managed = last_segment(inputs["managedZone"])
        return f"projects/{project}/managedZones/{managed}/rrsets/{inputs['name']}/{inputs['type']}"

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        found = zone(project, inputs["managedZone"])
        if not (
            inputs["name"] == found["dnsName"] or inputs["name"].endswith("." + found["dnsName"])
        ):
            raise ApiError(
                f"googleapi: Error 400: The resource record set name '{inputs['name']}' is not "
                f"within the zone's DNS name '{found['dnsName']}'., invalid"
            )
        key = self._key(project, inputs)
        outputs = {**inputs, "project": project}
        if not Store(RECORDS).insert(key, outputs):
            raise ApiError(
                f"googleapi: Error 409: The resource 'entity.change.additions[{inputs['name']}]' "
                f"named '{inputs['name']} ({inputs['type']})' already exists, alreadyExists"
            )
        return key, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored(RECORDS, resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(RECORDS)
        if store.get(resource_id) is None:
            raise ApiError(
                f"googleapi: Error 404: The resource record set '{resource_id}' does not "
                "exist., notFound"
            )
        outputs = {**olds, **news, "project": olds["project"]}
        store.delete(resource_id)
        store.put(self._key(olds["project"], outputs), outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionPolicy") != "ABANDON":
            Store(RECORDS).delete(resource_id)


class GetManagedZone(Function):
    token = "gcp:dns/getManagedZone:getManagedZone"

    def call(self, ctx: Context, args: Plain) -> Plain:
        project = ctx.project(args)
        found = zone(project, args["name"])
        return {
            "id": f"projects/{project}/managedZones/{args['name']}",
            "project": project,
            "name": found["name"],
            "dnsName": found["dnsName"],
            "description": found.get("description", ""),
            "visibility": found.get("visibility", "public"),
            "nameServers": found.get("nameServers", []),
            "managedZoneId": found.get("id", ""),
        }


class GetRecordSet(Function):
    token = "gcp:dns/getRecordSet:getRecordSet"

    def call(self, ctx: Context, args: Plain) -> Plain:
        project = ctx.project(args)
        zone(project, args["managedZone"])
        key = RecordSet()._key(project, args)
        record = Store(RECORDS).get(key)
        if record is None:
            raise ApiError("Only expected 1 record set, got 0")
        return {
            "id": key,
            "project": project,
            "managedZone": args["managedZone"],
            "name": args["name"],
            "type": args["type"],
            "rrdatas": record.get("rrdatas") or [],
            "ttl": record.get("ttl", 0),
        }
