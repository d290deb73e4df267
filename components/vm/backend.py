"""The VM backend: one TPU VM from a flex-start queued resource, served over SSH.

Resource names and parents are those the program has always used, so existing stacks see no
replacement. The DNS record comes last: its address waits for the readiness check, so in a
create-first renewal the name moves only to a node that serves.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from components import log_links
from components.compile_cache import CompileCache, CompileCacheArgs
from components.config import StackConfig
from components.dns import EndpointName, EndpointNameArgs, ManagedZone
from components.monitoring import StackMonitoring, StackMonitoringArgs
from components.outputs import BackendOutputs, endpoint_urls, text_or_empty
from components.renewal import expiry_notice, renew_command
from components.secrets import NodeSecrets, NodeSecretsArgs
from components.vllm_metrics import queries_for
from components.vm.queued_resource_spec import node_ids
from components.vm.secrets_fetch import fetch_secrets
from components.vm.ssh import SshIdentity, ssh_command
from components.vm.tpu import FlexStartTpu, FlexStartTpuArgs
from components.vm.vllm import VllmServer, VllmServerArgs


def build_vm(
    config: StackConfig,
    managed_zone: ManagedZone | None,
    image: pulumi.Input[str],
    uptime_ranges: Sequence[str],
) -> BackendOutputs:
    """Register the VM backend's components and return its part of the outputs.

    `image` is the pinned `NAME@sha256:...` (components/image_pin.py) the node serves."""
    ssh = SshIdentity("ssh")
    metadata = ssh.metadata(publish_host_key=not config.access.allow_unverified_host_key)
    tpu = FlexStartTpu("tpu", FlexStartTpuArgs.of(config, image, metadata, uptime_ranges))
    connection = ssh.connection(tpu.external_ip, tpu.host_key)
    secrets = NodeSecrets(
        "secrets",
        NodeSecretsArgs.of(config, tpu.service_account_email),
    )
    fetch = fetch_secrets(secrets, connection)
    cache = (
        CompileCache(
            "compile-cache",
            CompileCacheArgs.of(config, tpu.service_account_email),
        )
        if config.cache.enabled
        else None
    )
    server = VllmServer(
        "vllm",
        VllmServerArgs(
            settings=config.server_settings(),
            connection=connection,
            image=image,
            after=[fetch],
            cache=cache,
            telemetry_grants=tpu.telemetry_grants,
        ),
    )
    # The name follows a node only once its server answered: the record's address waits for
    # the readiness check (startup complete, /health, /v1/models) on that node.
    serving_address = pulumi.Output.all(tpu.external_ip, server.ready.stdout).apply(
        lambda parts: parts[0]
    )
    name = (
        EndpointName(
            "endpoint-name",
            EndpointNameArgs(
                project=config.project, dns=config.dns, zone=managed_zone, address=serving_address
            ),
        )
        if managed_zone is not None and config.dns is not None
        else None
    )
    urls = endpoint_urls(
        tpu.external_ip,
        name.hostname if name is not None else None,
        config.vllm.port,
        server.ready.stdout,
    )
    watch = StackMonitoring(
        "monitoring",
        StackMonitoringArgs(
            project=config.project,
            stack=config.stack,
            monitoring=config.monitoring,
            port=config.vllm.port,
            backend="vm",
            queries=queries_for(
                config.stack, scrape_seconds=config.monitoring.scrape_interval_seconds
            ),
            host=name.hostname if name is not None else text_or_empty(tpu.external_ip),
            after=[server.ready],
            tpu_nodes=node_ids(config.stack),
        ),
    )
    logs = log_links.vm_filter(config.project, config.stack)
    # When the run ends and when its successor is requested, printed at the end of `pulumi up`.
    tpu.expires_at.apply(
        lambda at: pulumi.log.info(
            expiry_notice(config.stack, config.tpu.max_run_seconds, at, config.renewal.lead_seconds)
        )
    )
    return BackendOutputs(
        endpoint=urls.endpoint,
        endpoint_ip=urls.endpoint_ip,
        openai_base_url=urls.openai_base_url,
        api_key=secrets.api_key,
        api_key_secret=secrets.api_key_secret,
        zone=tpu.zone,
        queued_resource=tpu.queued_resource,
        node=tpu.node,
        external_ip=tpu.external_ip,
        internal_ip=tpu.internal_ip,
        expires_at=tpu.expires_at,
        renew_command=renew_command(config.stack),
        ssh_command=ssh_command(config.stack, tpu.external_ip),
        ssh_private_key=ssh.private_key_openssh,
        ssh_host_key=tpu.host_key,
        hbm=server.hbm,
        startup_seconds=server.startup_seconds,
        first_answer_seconds=server.first_answer_seconds,
        replicas=1,
        cluster="",
        cache_restored=server.cache_restored,
        dashboard_url=watch.dashboard_url,
        # The log leaves the node only through the gcplogs driver (`monitoring.enabled`).
        logs_command=(
            log_links.logs_command(config.project, logs, "jsonPayload.message")
            if config.monitoring.enabled
            else ""
        ),
        logs_url=log_links.logs_url(config.project, logs) if config.monitoring.enabled else "",
        uptime_check=watch.uptime_check,
    )
