"""Pre-flight: what the cloud says about the cluster, read before anything is registered.

`__main__.py` calls `preflight` first, so a cluster that cannot carry the stack's ComputeClass
(GKE too old for flex-start TPUs, node auto-provisioning off where the class needs it, a release
channel whose default is too old) stops the run with nothing created. docs/gke.md
"Prerequisites".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import catalog
from components.config import ConfigError, GkeSettings, StackConfig
from components.gke import nap_limits

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?")

RELEASE_CHANNEL = "REGULAR"


def cluster_path(settings: GkeSettings, name: str) -> str:
    return f"projects/{settings.cluster_project}/locations/{settings.location}/clusters/{name}"


def gke_version_key(version: str) -> tuple[int, ...] | None:
    """`1.33.0-gke.1712000` -> (1, 33, 0, 1712000); None when it does not parse."""
    match = _VERSION_RE.match(version or "")
    return tuple(int(g or 0) for g in match.groups()) if match else None


def supports_flex_start_tpus(version: str) -> bool:
    return _at_least(version, catalog.GKE_MIN_FLEX_START_VERSION)


def class_creates_pools_itself(version: str) -> bool:
    """Whether a ComputeClass creates node pools without cluster-level auto-provisioning."""
    return _at_least(version, catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION)


def _at_least(version: str, floor: str) -> bool:
    have, need = gke_version_key(version), gke_version_key(floor)
    return have is not None and need is not None and have >= need


def _auto_provisioning(found: Any) -> bool | None:
    """Cluster-level node auto-provisioning, from `getCluster`; None when not reported."""
    scalings = getattr(found, "cluster_autoscalings", None)
    if scalings is None:
        return None
    return any(getattr(s, "enabled", False) for s in scalings)


def check_existing_cluster(config: StackConfig, found: Any) -> None:
    """Stop before anything is created if an existing cluster cannot run this backend.

    Fields `getCluster` did not return (a mocked lookup) are not judged."""
    key = "tpu-vllm:gke.cluster"
    where = cluster_path(config.gke, config.gke.existing_cluster)
    problems: list[str] = []
    version = getattr(found, "master_version", None)
    floor = catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION
    if version and not supports_flex_start_tpus(str(version)):
        problems.append(
            f"{key} = {where!r} runs GKE {version}; flex-start TPU node pools need "
            f"{catalog.GKE_MIN_FLEX_START_VERSION} or later, and the stack's ComputeClass "
            f"creates its node pools itself from {floor}. Fix: upgrade it "
            f"(`gcloud container clusters upgrade --master`) or unset {key} to create one"
        )
    elif (
        version
        and not class_creates_pools_itself(str(version))
        and _auto_provisioning(found) is False
    ):
        problems.append(
            f"{key} = {where!r} runs GKE {version}: before {floor} a ComputeClass creates node "
            "pools (here: the TPU nodes and their recycling) only with cluster-level node "
            f"auto-provisioning, which is off. Fix: upgrade it to {floor} or later "
            "(`gcloud container clusters upgrade --master`), or enable it "
            "(`gcloud container clusters update ... --enable-autoprovisioning` with CPU and "
            "memory limits)"
        )
    problems += nap_limits.limit_problems(config, found, where)
    unsettled = nap_limits.missing_tpu_limit(config, found, where)
    if unsettled:
        pulumi.log.warn(unsettled)
    pools = getattr(found, "workload_identity_configs", None)
    if pools is not None and not any(getattr(p, "workload_pool", None) for p in pools):
        problems.append(
            f"{key} = {where!r} has no Workload Identity, which the pods need to read their "
            f"secrets. Fix: `gcloud container clusters update ... "
            f"--workload-pool={config.gke.cluster_project}.svc.id.goog`"
        )
    managers = getattr(found, "secret_manager_configs", None)
    if managers is not None and not any(getattr(m, "enabled", False) for m in managers):
        problems.append(
            f"{key} = {where!r} has no Secret Manager add-on, which mounts the HF token and API "
            "key into the pods. Fix: `gcloud container clusters update ... --enable-secret-manager`"
        )
    if problems:
        raise ConfigError(problems)


def managed_collection_off(found: Any) -> bool:
    """Whether `getCluster` says managed collection is off; False when not reported."""
    configs = getattr(found, "monitoring_configs", None) or []
    flags = [
        getattr(m, "enabled", None)
        for c in configs
        for m in (getattr(c, "managed_prometheuses", None) or [])
    ]
    return bool(flags) and not any(flags)


def warn_managed_collection(config: StackConfig) -> None:
    where = cluster_path(config.gke, config.gke.existing_cluster)
    pulumi.log.warn(
        f"tpu-vllm:gke.cluster = {where!r} has Managed Service for Prometheus' managed "  # noqa: S608 - a message, not SQL
        "collection off (monitoringConfig.managedPrometheusConfig.enabled), so vLLM's metrics "
        "cannot be collected and the stack creates no PodMonitoring; the dashboard stays empty "
        "of vLLM series. Fix: `gcloud container clusters update "
        f"{config.gke.existing_cluster} --location {config.gke.location} "
        "--enable-managed-prometheus`, then `pulumi up` again, or set "
        "tpu-vllm:monitoring.enabled to false."
    )


def lookup_existing_cluster(config: StackConfig) -> Any:
    """At preview too, before any resource: a wrong name fails here, clearly."""
    settings = config.gke
    try:
        return gcp.container.get_cluster(
            name=settings.existing_cluster,
            location=settings.location,
            project=settings.cluster_project,
        )
    except Exception as error:  # noqa: BLE001 - the SDK raises a plain Exception for invokes
        raise ConfigError(
            [
                f"tpu-vllm:gke.cluster = {settings.existing_cluster!r}: cluster "
                f"{cluster_path(settings, settings.existing_cluster)} was not found or cannot be "
                f"read ({error}). Fix: name a cluster in {settings.location} (or give its path "
                "projects/P/locations/L/clusters/NAME), or unset the key to create one"
            ]
        ) from None


def check_channel_version(config: StackConfig, versions: Any) -> None:
    """Stop before anything is created if the channel's default version, which a created
    cluster gets, could not carry the stack's ComputeClass. Unreported: not judged."""
    defaults = getattr(versions, "release_channel_default_version", None) or {}
    version = defaults.get(RELEASE_CHANNEL)
    floor = catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION
    if version and not class_creates_pools_itself(str(version)):
        raise ConfigError(
            [
                f"tpu-vllm:gke.cluster is unset, so the stack would create a cluster in "
                f"{config.gke.location} on the {RELEASE_CHANNEL} channel, whose default GKE "
                f"{version} is older than {floor}, from which the stack's ComputeClass creates "
                "(and recycles) its flex-start TPU node pools without node auto-provisioning "
                f"(flex-start TPUs alone need {catalog.GKE_MIN_FLEX_START_VERSION}). Fix: name "
                "a cluster on that version or later in tpu-vllm:gke.cluster, or wait for the "
                "channel to move"
            ]
        )


def lookup_channel_versions(config: StackConfig) -> Any:
    """At preview too."""
    settings = config.gke
    try:
        return gcp.container.get_engine_versions(
            location=settings.location, project=settings.cluster_project
        )
    except Exception as error:  # noqa: BLE001 - the SDK raises a plain Exception for invokes
        raise ConfigError(
            [
                f"tpu-vllm:tpu.zones: GKE versions in {settings.location} (project "
                f"{settings.cluster_project}) cannot be read ({error}). Fix: enable the API "
                "(`gcloud services enable container.googleapis.com`) and check your access to it"
            ]
        ) from None


@dataclass(frozen=True)
class Preflight:
    """`getCluster`'s answer (None: the stack creates one), and whether vLLM's metrics can be
    collected."""

    found: Any
    managed_collection: bool


def preflight(config: StackConfig) -> Preflight:
    """Run before anything is registered, so a cluster that cannot serve stops with nothing
    made."""
    found = lookup_existing_cluster(config) if not config.gke.creates_cluster else None
    managed_collection = config.monitoring.enabled
    if found is not None:
        check_existing_cluster(config, found)
        if config.monitoring.enabled and managed_collection_off(found):
            warn_managed_collection(config)
            managed_collection = False
    else:
        check_channel_version(config, lookup_channel_versions(config))
    return Preflight(found, managed_collection)
