"""The `gke` section: how many replicas, which cluster, and what backend gke demands of the chip
and the zones."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from components import catalog
from components.catalog import Chip, Provisioning
from components.config.backend import DEFAULT_BACKEND, Backend
from components.config.keys import NAMESPACE
from components.config.reader import Reader, as_int, as_str
from components.messages import show

#: Two, so a node being recycled never takes the endpoint down (docs/gke.md).
DEFAULT_GKE_REPLICAS = 2
_CLUSTER_NAME_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
_CLUSTER_PATH_RE = re.compile(
    r"^projects/(?P<project>[a-z][-a-z0-9.:]{4,61}[a-z0-9])/locations/(?P<location>[a-z]+-[a-z]+[0-9]+(?:-[a-z])?)"
    r"/clusters/(?P<name>[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)$"
)


@dataclass(frozen=True)
class GkeSettings:
    """The GKE backend's shape: how many replicas, and which cluster they run in."""

    replicas: int
    #: Name of an existing cluster to use; "" when the stack creates its own.
    existing_cluster: str
    #: The cluster's project (the stack's, unless an existing cluster's path names another).
    cluster_project: str
    #: Where the cluster lives: the one zone of `tpu.zones`, else their region (or the location
    #: an existing cluster's path names).
    location: str
    #: The region of `tpu.zones`: where the load balancer's reserved address lives.
    region: str

    @property
    def creates_cluster(self) -> bool:
        return not self.existing_cluster


def region_of(zone: str) -> str:
    """`us-east5-a` -> `us-east5`."""
    return zone.rsplit("-", 1)[0]


def parse_gke(
    r: Reader,
    *,
    backend: Backend | None,
    chip: Chip | None,
    provisioning: Provisioning | None,
    zones: tuple[str, ...],
    project: str | None,
    warnings: list[str],
) -> GkeSettings | None:
    """The `gke` section, and what the gke backend demands of the chip and zones."""
    before = len(r.problems)
    replicas = r.get("replicas", as_int, DEFAULT_GKE_REPLICAS, "a whole number of replicas")
    if replicas < 1:
        r.fail(
            "replicas",
            replicas,
            "must be at least 1 (one TPU node of the stack's ComputeClass per replica). Fix: "
            f"`pulumi config set --path '{r.key('replicas')}' 1`, or `pulumi destroy` to stop",
        )
    cluster = r.get("cluster", as_str, "", "a cluster name or projects/P/locations/L/clusters/N")
    path = _CLUSTER_PATH_RE.match(cluster) if cluster else None
    if cluster and not path and not _CLUSTER_NAME_RE.match(cluster):
        r.fail(
            "cluster",
            cluster,
            "not a GKE cluster name. Fix: the cluster's name (lower-case letters, digits and -, "
            "at most 40) or its path projects/PROJECT/locations/LOCATION/clusters/NAME; remove "
            "the key to let the stack create one",
        )
    if backend != "gke":
        if r.values:
            warnings.append(
                f"{NAMESPACE}:gke is set, but {NAMESPACE}:backend = "
                f"{show(backend or DEFAULT_BACKEND)}: the gke keys are ignored. Fix: set "
                f"{NAMESPACE}:backend to gke, or remove them."
            )
        if len(r.problems) != before or not zones:
            return None
        return GkeSettings(replicas, "", project or "", _location_of(zones), region_of(zones[0]))
    if chip is not None and chip.gke is None:
        r.problems.append(
            f"{NAMESPACE}:tpu.chip = {chip.name!r}: backend gke needs a single-host slice with a "
            f"GKE machine type. Fix: one of {', '.join(catalog.GKE_TPUS)}"
        )
    if chip is not None and zones:
        _check_gke_zones(r, chip, provisioning, zones)
    location = _location_of(zones) if zones else ""
    cluster_project = project or ""
    if path:
        cluster_project, location = path["project"], path["location"]
        region = location if location.count("-") == 1 else region_of(location)
        outside = [z for z in zones if not (z == location or region_of(z) == location)]
        if zones and (outside or region_of(zones[0]) != region):
            r.fail(
                "cluster",
                cluster,
                f"is in {location}, but {NAMESPACE}:tpu.zones lists {', '.join(outside or zones)}"
                ": the ComputeClass's TPU nodes can only be in zones of its cluster. Fix: list "
                f"zones of {location} in {NAMESPACE}:tpu.zones, or name a cluster in their region",
            )
    if len(r.problems) != before or not zones:
        return None
    name = path["name"] if path else cluster
    return GkeSettings(replicas, name, cluster_project, location, region_of(zones[0]))


def _location_of(zones: Sequence[str]) -> str:
    """One zone -> a zonal cluster there; several -> a regional cluster in their region."""
    return zones[0] if len(zones) == 1 else region_of(zones[0])


def _check_gke_zones(
    r: Reader, chip: Chip, provisioning: Provisioning | None, zones: Sequence[str]
) -> None:
    regions = sorted({region_of(z) for z in zones})
    if len(regions) > 1:
        r.problems.append(
            f"{NAMESPACE}:tpu.zones = {show(list(zones))}: backend gke runs one cluster, in one "
            f"region, but these zones span {', '.join(regions)}. Fix: list zones of one region"
        )
        return
    if provisioning != "flex-start":
        return
    offered = catalog.GKE_FLEX_START_ZONES.get(chip.family.name, ())
    missing = [z for z in zones if z not in offered]
    if missing:
        r.problems.append(
            f"{NAMESPACE}:tpu.zones = {show(list(zones))}: GKE offers flex-start "
            f'{chip.family.name} TPUs only in {", ".join(offered)} (GKE docs, "About GPU and '
            f'TPU provisioning with flex-start"), not in {", ".join(missing)}. Fix: list zones '
            f"from {', '.join(offered)}, or use backend vm (the TPU API offers more zones)"
        )
