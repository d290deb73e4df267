"""gcp stand-in: GKE (`container.Cluster`, `container.NodePool`, `getCluster`,
`getEngineVersions`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/container/`
(`resource_container_cluster.go`, `resource_container_node_pool.go`, `node_config.go`,
`data_source_google_container_cluster.go`, `data_source_google_container_engine_versions.go`):
- Cluster: ForceNew `name`, `location`, `project`, `description`, `initial_node_count`,
  `network` (default "default"), `subnetwork`, `ip_allocation_policy`, `networking_mode`
  (VPC_NATIVE | ROUTES); `release_channel.channel` one of UNSPECIFIED, RAPID, REGULAR, STABLE,
  EXTENDED; `deletion_protection` default true, and then "Cannot destroy cluster because
  deletion_protection is set to true. ..."; id `projects/{p}/locations/{l}/clusters/{name}`;
  `endpoint` an address (here from 192.0.2.0/24, RFC 5737), `master_auth.cluster_ca_certificate`
  a base64 PEM (here a real self-signed CA), `master_version` the channel's default;
  `monitoring_config` Optional+Computed, updated in place (`DesiredMonitoringConfig`), its
  `enable_components`, `managed_prometheus` and `advanced_datapath_observability_config` each
  Optional+Computed (kept from the state when left out); GKE answers `enable_components`
  `["SYSTEM_COMPONENTS"]` and managed collection on when they are not set (GKE docs: system
  metrics are on by default; "Managed collection is enabled by default" for Standard clusters
  from 1.27);
- NodePool: ForceNew `name`, `cluster`, `location`, `project`, `initial_node_count`,
  `node_config.oauth_scopes` (and the node config's other ForceNew fields the program does not
  set); `node_count`, `management` (auto_repair/auto_upgrade default true),
  `node_config.machine_type`, `disk_size_gb` (at least 10) and
  `workload_metadata_config.mode` (MODE_UNSPECIFIED | GCE_METADATA | GKE_METADATA) update in
  place; id `projects/{p}/locations/{l}/clusters/{c}/nodePools/{name}`;
- getCluster: the resource's read, nested blocks as lists (`monitoringConfigs[].
  managedPrometheuses[].autoMonitoringConfigs`, as `flattenMonitoringConfig` and
  `flattenManagedPrometheusConfig` set them); "{id} not found" when absent;
- getEngineVersions: `projects.locations.getServerConfig`'s answer. Tests seed it with
  `seed_server_config`; unseeded, `DEFAULT_SERVER_CONFIG` answers (versions invented in GKE's
  format, not read from GKE), and a cluster created without a seeded config gets its REGULAR
  default.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.standins.gcp_common import label_outputs, not_found, read_stored
from tests.support.standins.kinds import (
    ApiError,
    Context,
    Function,
    Kind,
    canonical,
    enum_failure,
    fixed,
)
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import Plain

CLUSTERS, POOLS, SERVER_CONFIGS = (
    "container_clusters",
    "container_node_pools",
    "container_server_configs",
)
CONTAINER_V1BETA1 = "https://container.googleapis.com/v1beta1/"
DEFAULT_SERVER_CONFIG: Plain = {
    "defaultClusterVersion": "1.33.5-gke.1201000",
    "validMasterVersions": ["1.34.1-gke.1431000", "1.33.5-gke.1201000", "1.32.9-gke.1130000"],
    "validNodeVersions": ["1.34.1-gke.1431000", "1.33.5-gke.1201000", "1.32.9-gke.1130000"],
    "channels": {
        "RAPID": {"defaultVersion": "1.34.1-gke.1431000", "validVersions": ["1.34.1-gke.1431000"]},
        "REGULAR": {
            "defaultVersion": "1.33.5-gke.1201000",
            "validVersions": ["1.33.5-gke.1201000"],
        },
        "STABLE": {"defaultVersion": "1.32.9-gke.1130000", "validVersions": ["1.32.9-gke.1130000"]},
    },
}
_NODE_CONFIG_FORCE_NEW = (
    "oauthScopes",
    "diskType",
    "imageType",
    "localSsdCount",
    "preemptible",
    "spot",
)


def seed_server_config(root: Path, project: str, location: str, config: Plain) -> None:
    Store(SERVER_CONFIGS, root).put(f"projects/{project}/locations/{location}", config)


def seed_cluster(root: Path, project: str, location: str, name: str, fields: Plain) -> None:
    """A cluster made outside the stack (`gke.cluster`), in the resource's output shape."""
    Store(CLUSTERS, root).put(
        f"projects/{project}/locations/{location}/clusters/{name}",
        {"name": name, "location": location, "project": project, **fields},
    )


def server_config(project: str, location: str) -> Plain:
    found: Plain | None = Store(SERVER_CONFIGS).get(f"projects/{project}/locations/{location}")
    return found or DEFAULT_SERVER_CONFIG


def self_signed_ca(name: str) -> str:
    """A cluster CA as GKE hands it out: a base64-encoded PEM certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1825))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()


def location_of(ctx: Context, inputs: Plain) -> str:
    """`tpgresource.GetLocation`: `location`, else the provider's zone, else its region."""
    value = inputs.get("location") or ctx.config.get("zone") or ctx.config.get("region")
    if not value:
        raise ApiError(
            "Cannot determine location: set location in this resource, or set zone or region "
            "in the provider"
        )
    return str(value)


class Cluster(Kind):
    token = "gcp:container/cluster:Cluster"
    replace_on = frozenset(
        [
            "name",
            "location",
            "project",
            "description",
            "initialNodeCount",
            "network",
            "subnetwork",
            "ipAllocationPolicy",
            "networkingMode",
            "enableAutopilot",
            "enableKubernetesAlpha",
        ]
    )
    computed = frozenset(
        [
            "location",
            "project",
            "nodeLocations",
            "masterAuth",
            "workloadIdentityConfig",
            "releaseChannel",
            "ipAllocationPolicy",
            "networkingMode",
            "subnetwork",
            "deletionPolicy",
            "monitoringConfig",
        ]
    )
    from_provider = fixed(project="project")
    defaults = fixed(network="default", deletionProtection=True)
    autoname = ("name", 255)

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "monitoringConfig" and isinstance(old, dict) and isinstance(new, dict):
            return _monitoring_same(old, new)
        return super().same(prop, old, new)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = enum_failure(inputs, "networkingMode", ["VPC_NATIVE", "ROUTES"])
        prometheus = (inputs.get("monitoringConfig") or {}).get("managedPrometheus") or {}
        failures += [
            Failure(
                f"monitoringConfig.managedPrometheus.autoMonitoringConfig.{f.property}", f.reason
            )
            for f in enum_failure(
                prometheus.get("autoMonitoringConfig") or {}, "scope", ["ALL", "NONE"]
            )
        ]
        channel = inputs.get("releaseChannel")
        if isinstance(channel, dict):
            failures += [
                Failure(f"releaseChannel.{f.property}", f.reason)
                for f in enum_failure(
                    channel, "channel", ["UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED"]
                )
            ]
        return failures

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project, location = ctx.project(inputs), location_of(ctx, inputs)
        path = f"projects/{project}/locations/{location}/clusters/{inputs['name']}"
        store = Store(CLUSTERS)
        taken = {c.get("endpoint") for c in store.all().values()}
        endpoint = next(
            str(ip) for ip in ipaddress.ip_network("192.0.2.0/24").hosts() if str(ip) not in taken
        )
        channel = (inputs.get("releaseChannel") or {}).get("channel") or "REGULAR"
        versions = server_config(project, location)
        version = (
            versions["channels"].get(channel, {}).get("defaultVersion")
            or versions["defaultClusterVersion"]
        )
        outputs = {
            **inputs,
            **label_outputs(inputs, "resourceLabels"),
            "project": project,
            "location": location,
            "endpoint": endpoint,
            "masterVersion": version,
            "masterAuth": {
                "clusterCaCertificate": self_signed_ca(inputs["name"]),
                "clientCertificate": "",
                "clientKey": "",
                "clientCertificateConfig": {"issueClientCertificate": False},
            },
            "releaseChannel": {"channel": channel},
            "monitoringConfig": _monitoring_answer(inputs.get("monitoringConfig")),
            "networkingMode": inputs.get("networkingMode") or "VPC_NATIVE",
            "selfLink": CONTAINER_V1BETA1 + path,
            "operation": "",
        }
        if not store.insert(path, outputs):
            raise ApiError(f"googleapi: Error 409: Already exists: {path}., alreadyExists")
        return path, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored(CLUSTERS, resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(CLUSTERS)
        if store.get(resource_id) is None:
            raise not_found(f"Cluster {resource_id}")
        keep: Plain = {
            k: olds[k]
            for k in ("project", "location", "endpoint", "masterAuth", "masterVersion")
            if k in olds
        }
        outputs = {**olds, **news, **label_outputs(news, "resourceLabels"), **keep}
        if isinstance(news.get("monitoringConfig"), dict):
            outputs["monitoringConfig"] = _monitoring_answer(
                {**(olds.get("monitoringConfig") or {}), **news["monitoringConfig"]}
            )
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionProtection"):
            raise ApiError(
                "Cannot destroy cluster because deletion_protection is set to true. Set it to "
                "false to proceed with cluster deletion."
            )
        Store(CLUSTERS).delete(resource_id)
        pools = Store(POOLS)
        for key in pools.all():
            if key.startswith(f"{resource_id}/nodePools/"):
                pools.delete(key)


class NodePool(Kind):
    token = "gcp:container/nodePool:NodePool"
    replace_on = frozenset(
        ["name", "namePrefix", "cluster", "location", "project", "initialNodeCount"]
    )
    computed = frozenset(
        [
            "name",
            "location",
            "project",
            "nodeLocations",
            "nodeCount",
            "management",
            "initialNodeCount",
            "version",
            "deletionPolicy",
        ]
    )
    from_provider = fixed(project="project")
    unordered = frozenset(["nodeLocations"])

    def replaces(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "nodeConfig" and isinstance(old, dict) and isinstance(new, dict):
            return any(
                canonical(old.get(k)) != canonical(new.get(k))
                for k in _NODE_CONFIG_FORCE_NEW
                if k in new
            )
        return prop in self.replace_on

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        config = inputs.get("nodeConfig") or {}
        failures = []
        disk = config.get("diskSizeGb")
        if isinstance(disk, int | float) and disk < 10:
            failures.append(
                Failure(
                    "nodeConfig.diskSizeGb",
                    f"expected node_config.0.disk_size_gb to be at least (10), got {int(disk)}",
                )
            )
        mode = config.get("workloadMetadataConfig") or {}
        failures += [
            Failure("nodeConfig.workloadMetadataConfig.mode", f.reason)
            for f in enum_failure(
                mode, "mode", ["MODE_UNSPECIFIED", "GCE_METADATA", "GKE_METADATA"]
            )
        ]
        return failures

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project, location = ctx.project(inputs), location_of(ctx, inputs)
        cluster_path = f"projects/{project}/locations/{location}/clusters/{inputs['cluster']}"
        cluster = Store(CLUSTERS).get(cluster_path)
        if cluster is None:
            raise not_found(f"Cluster {cluster_path}")
        name = inputs.get("name") or f"{inputs.get('namePrefix') or 'tf-'}{ctx.project(inputs)[:4]}"
        path = f"{cluster_path}/nodePools/{name}"
        management = {"autoRepair": True, "autoUpgrade": True, **(inputs.get("management") or {})}
        outputs = {
            **inputs,
            "name": name,
            "project": project,
            "location": location,
            "management": management,
            "nodeCount": inputs.get("nodeCount", inputs.get("initialNodeCount", 1)),
            "nodeLocations": inputs.get("nodeLocations") or cluster.get("nodeLocations") or [],
            "version": cluster.get("masterVersion", ""),
            "instanceGroupUrls": [],
            "managedInstanceGroupUrls": [],
            "operation": "",
        }
        if not Store(POOLS).insert(path, outputs):
            raise ApiError(f"googleapi: Error 409: Already exists: {path}., alreadyExists")
        return path, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored(POOLS, resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(POOLS)
        if store.get(resource_id) is None:
            raise not_found(f"NodePool {resource_id}")
        management = {"autoRepair": True, "autoUpgrade": True, **(news.get("management") or {})}
        outputs = {
            **olds,
            **news,
            "management": management,
            "name": olds["name"],
            "project": olds["project"],
            "location": olds["location"],
        }
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        Store(POOLS).delete(resource_id)


def _monitoring_answer(given: Plain | None) -> Plain:
    """The cluster's `monitoringConfig` as GKE answers it. With no block, GKE's defaults: system
    components and managed collection on. With a block, Terraform sends its
    `componentConfig.enableComponents` as the block has it, an empty list when left out
    (google-beta `resource_container_cluster.go` `expandMonitoringConfig` reads the key
    unconditionally; SDK v2 fills an unset list with its zero value), and GKE reads an empty
    set as "disable all monitoring" (`MonitoringComponentConfig.enableComponents`)."""
    if given is None:
        return {"enableComponents": ["SYSTEM_COMPONENTS"], "managedPrometheus": {"enabled": True}}
    answer: Plain = {
        "enableComponents": [],
        "managedPrometheus": {"enabled": True},
        **{k: v for k, v in given.items() if v is not None},
    }
    return answer


def _monitoring_same(old: Plain, new: Plain) -> bool:
    """Whether the inputs' `monitoringConfig` is the state's: the Optional+Computed parts they
    leave out keep the state's value, and `enableComponents` (a set) is compared unordered."""

    def given(config: Plain, keys: Plain) -> Plain:
        return {k: v for k, v in config.items() if keys.get(k) is not None}

    seen = given(old, new)
    if isinstance(seen.get("managedPrometheus"), dict) and isinstance(
        new.get("managedPrometheus"), dict
    ):
        seen["managedPrometheus"] = given(seen["managedPrometheus"], new["managedPrometheus"])

    def spelled(config: Plain) -> str:
        components = config.get("enableComponents")
        if isinstance(components, list):
            config = {**config, "enableComponents": sorted(components)}
        return canonical(config)

    return spelled(seen) == spelled(new)


def _monitoring_listed(config: Plain) -> Plain:
    """getCluster's `monitoringConfigs[0]`: every block a list (pulumi-gcp's plural names)."""
    prometheus = config.get("managedPrometheus")
    datapath = config.get("advancedDatapathObservabilityConfig")
    return {
        "enableComponents": list(config.get("enableComponents") or []),
        "managedPrometheuses": [
            {
                "enabled": bool(prometheus.get("enabled")),
                "autoMonitoringConfigs": [prometheus["autoMonitoringConfig"]]
                if prometheus.get("autoMonitoringConfig")
                else [],
            }
        ]
        if isinstance(prometheus, dict)
        else [],
        "advancedDatapathObservabilityConfigs": [datapath] if isinstance(datapath, dict) else [],
    }


class GetCluster(Function):
    token = "gcp:container/getCluster:getCluster"

    def call(self, ctx: Context, args: Plain) -> Plain:
        project, location = ctx.project(args), location_of(ctx, args)
        path = f"projects/{project}/locations/{location}/clusters/{args['name']}"
        found = Store(CLUSTERS).get(path)
        if found is None:
            raise ApiError(f"{path} not found")
        listed = {
            "masterAuths": [found.get("masterAuth") or {}],
            "workloadIdentityConfigs": [found["workloadIdentityConfig"]]
            if found.get("workloadIdentityConfig")
            else [],
            "secretManagerConfigs": [found["secretManagerConfig"]]
            if found.get("secretManagerConfig")
            else [],
            "clusterAutoscalings": [found.get("clusterAutoscaling") or {"enabled": False}],
            "releaseChannels": [found["releaseChannel"]] if found.get("releaseChannel") else [],
            "monitoringConfigs": [_monitoring_listed(found["monitoringConfig"])]
            if found.get("monitoringConfig")
            else [],
        }
        plain = {k: v for k, v in found.items() if not isinstance(v, dict)}
        return {
            **plain,
            **listed,
            "id": path,
            "project": project,
            "location": location,
            "name": args["name"],
        }


class GetEngineVersions(Function):
    token = "gcp:container/getEngineVersions:getEngineVersions"

    def call(self, ctx: Context, args: Plain) -> Plain:
        project, location = ctx.project(args), location_of(ctx, args)
        config = server_config(project, location)
        prefix = args.get("versionPrefix") or ""
        masters = [v for v in config["validMasterVersions"] if v.startswith(prefix)]
        nodes = [v for v in config["validNodeVersions"] if v.startswith(prefix)]
        channels = config.get("channels", {})
        return {
            "id": datetime.datetime.now(datetime.UTC).isoformat(),
            "project": project,
            "location": location,
            "defaultClusterVersion": config["defaultClusterVersion"],
            "validMasterVersions": masters,
            "validNodeVersions": nodes,
            "latestMasterVersion": masters[0] if masters else "",
            "latestNodeVersion": nodes[0] if nodes else "",
            "releaseChannelDefaultVersion": {c: v["defaultVersion"] for c, v in channels.items()},
            "releaseChannelLatestVersion": {c: v["validVersions"][0] for c, v in channels.items()},
            "releaseChannelUpgradeTargetVersion": {
                c: v["defaultVersion"] for c, v in channels.items()
            },
        }
