"""The GKE backend: N flex-start TPU replicas in a GKE cluster behind one reserved address.

The cluster has no TPU node pool: the TPU nodes come from the stack's ComputeClass, which also
recycles them, so there is nothing to renew (`renew_command` and `expires_at` are "").
Why and what is shared with the VM path: docs/gke.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from components import compile_cache, log_links
from components.compile_cache import CompileCache, CompileCacheArgs
from components.config import StackConfig
from components.dns import EndpointName, EndpointNameArgs, ManagedZone
from components.gke import k8s_manifests
from components.gke.cluster import GkeTpuCluster, GkeTpuClusterArgs
from components.gke.k8s_workload import GkeWorkload, GkeWorkloadArgs
from components.gke.preflight import Preflight
from components.monitoring import StackMonitoring, StackMonitoringArgs
from components.outputs import BackendOutputs
from components.renewal import gke_recycle_notice
from components.secrets import NodeSecrets, NodeSecretsArgs
from components.vllm_metrics import queries_for


def build_gke(
    config: StackConfig,
    managed_zone: ManagedZone | None,
    image: pulumi.Input[str],
    checked: Preflight,
    uptime_ranges: Sequence[str],
) -> BackendOutputs:
    """`image` is the pinned `NAME@sha256:...`; `checked` is `preflight.preflight`'s answer;
    `uptime_ranges` Google's uptime checkers' addresses (`monitoring.uptimeCheck`), else empty."""
    cluster = GkeTpuCluster("gke", GkeTpuClusterArgs.of(config, checked))
    # The reserved address never changes, so the record is written once and stays right.
    name = (
        EndpointName(
            "endpoint-name",
            EndpointNameArgs(
                project=config.project, dns=config.dns, zone=managed_zone, address=cluster.address
            ),
        )
        if managed_zone is not None and config.dns is not None
        else None
    )
    secrets = NodeSecrets(
        "secrets",
        NodeSecretsArgs.of(config, cluster.service_account_email),
    )
    cache = (
        CompileCache(
            "compile-cache",
            CompileCacheArgs.of(config, cluster.service_account_email),
        )
        if config.cache.enabled
        else None
    )
    workload = GkeWorkload(
        "vllm",
        GkeWorkloadArgs(
            settings=config.workload_settings(),
            image=image,
            kubeconfig=cluster.kubeconfig,
            cluster=cluster.cluster,
            service_account_email=cluster.service_account_email,
            address=cluster.address,
            address_name=cluster.address_name,
            secrets=secrets,
            after=[cluster.workload_identity, *cluster.node_pools],
            cache=cache,
            hostname=name.hostname if name is not None else None,
            managed_collection=cluster.managed_collection,
            extra_source_ranges=list(uptime_ranges),
        ),
    )
    namespace = k8s_manifests.namespace_name(config.stack)
    watch = StackMonitoring(
        "monitoring",
        StackMonitoringArgs(
            project=config.project,
            stack=config.stack,
            monitoring=config.monitoring,
            port=config.vllm.port,
            backend="gke",
            queries=queries_for(config.stack, namespace, config.monitoring.scrape_interval_seconds),
            host=name.hostname if name is not None else cluster.address,
            namespace=namespace,
            after=[workload.ready],
        ),
    )
    # GKE's logging agent sends container logs to Cloud Logging whatever `monitoring` says.
    logs = log_links.gke_filter(namespace, k8s_manifests.CONTAINER)
    if not pulumi.runtime.is_dry_run():
        pulumi.log.info(
            gke_recycle_notice(
                config.stack, config.tpu.max_run_seconds, config.renewal.lead_seconds or 0
            )
        )
    # Outputs that name one VM mean nothing here: their documented empty values (docs/outputs.md).
    return BackendOutputs(
        endpoint=workload.endpoint,
        endpoint_ip=workload.endpoint_ip,
        openai_base_url=workload.openai_base_url,
        api_key=secrets.api_key,
        api_key_secret=secrets.api_key_secret,
        zone="",
        queued_resource="",
        node="",
        external_ip=cluster.address,
        internal_ip="",
        expires_at="",
        renew_command="",
        ssh_command="",
        ssh_private_key=pulumi.Output.secret(""),
        ssh_host_key="",
        hbm={},
        startup_seconds=None,  # each replica starts on its own, untimed
        first_answer_seconds=None,
        replicas=config.replicas,
        cluster=cluster.cluster,
        cache_restored={
            **compile_cache.NO_CACHE,
            "reason": (
                "per replica on GKE: kubectl logs POD -c xla-cache-restore"
                if cache
                else "tpu-vllm:cache.enabled is false"
            ),
        },
        dashboard_url=watch.dashboard_url,
        logs_command=log_links.logs_command(config.project, logs, "textPayload"),
        logs_url=log_links.logs_url(config.project, logs),
        uptime_check=watch.uptime_check,
    )
