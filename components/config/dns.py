"""The `dns` section: an optional stable name for the endpoint in a Cloud DNS managed zone."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.config.reader import Reader, as_str

# A managed zone's name follows Compute Engine's rule; a record name is RFC 1123 labels.
_MANAGED_ZONE_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class DnsSettings:
    """A stable name for the endpoint: an A record `name.ZONE_DNS_NAME` in `managed_zone`."""

    managed_zone: str
    #: Relative to the zone: `v5e1` becomes `v5e1.models.example.com.`.
    name: str


def parse_dns(r: Reader, stack: str) -> DnsSettings | None:
    """Both keys are optional; a name without a zone is a mistake, not a silent no-op."""
    zone = r.get("managedZone", as_str, None, "a Cloud DNS managed zone name")
    name = r.get("name", as_str, None, "a host name such as v5e1")
    if zone is None:
        if name is not None:
            r.fail(
                "name",
                name,
                f"has no effect without `{r.key('managedZone')}`. Fix: set the managed zone "
                f"(`pulumi config set --path '{r.key('managedZone')}' ZONE`) or remove the key",
            )
        return None
    if not _MANAGED_ZONE_RE.match(zone):
        r.fail(
            "managedZone",
            zone,
            "not a Cloud DNS managed zone name (1-63 lower-case letters, digits and dashes, "
            "starting with a letter). Fix: the zone's NAME from `gcloud dns managed-zones list`, "
            "not its DNS name",
        )
        return None
    if name is None:
        name = stack.lower()
        if not all(_DNS_LABEL_RE.match(label) for label in name.split(".")):
            r.fail(
                "name",
                None,
                f"the default, the stack name {stack!r}, is not a valid host name. Fix: "
                f"`pulumi config set --path '{r.key('name')}' NAME` with letters, digits and "
                "dashes",
            )
            return None
    elif not all(_DNS_LABEL_RE.match(label) for label in name.split(".")):
        r.fail(
            "name",
            name,
            "not a host name relative to the zone (dot-separated labels of lower-case letters, "
            "digits and dashes, at most 63 each). Fix: e.g. v5e1 or api.v5e1",
        )
        return None
    return DnsSettings(managed_zone=zone, name=name)
