"""The node's metrics agent: Google's Ops Agent scraping vLLM's /metrics into Cloud Monitoring.

Why the Ops Agent: it is Google's documented collector of Prometheus metrics on Compute Engine
(Cloud Monitoring docs "Collect Prometheus metrics", Ops Agent); its Prometheus receiver writes
through Managed Service for Prometheus, so the VM's series land where GKE's do and the same PromQL
reads both (components/vllm_metrics.py). It supports Ubuntu 22.04 (ops-agent `project.yaml`,
target `jammy`), the base of the TPU VM runtimes the stacks use (v2-alpha-tpuv5-lite,
v2-alpha-tpuv6e): Cloud TPU's "TPU software versions" says a runtime is Ubuntu plus Docker; that
these two are 22.04 is what third-party TPU setup scripts state, not verified on a TPU here.

When: a `remote.Command` after the readiness check, so the install (an apt install of a minute
or two) never slows the server's start; it runs again on every new node (the connection's host
changes). Its config turns the agent's default pipelines off (host metrics, syslog: billed and
not needed; the TPU VM's own metrics come from Cloud TPU) and scrapes only
`localhost:PORT/metrics` at `monitoring.scrapeInterval` as job `tpu-vllm-STACK`.
The container's log does not go through the agent: Docker's gcplogs driver ships it from the
first line (components/vm/node_scripts.py `log_flags`).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from components import vllm_metrics
from components.config import ServerSections
from components.remote_scripts import HEADER
from components.vm.node_scripts import fill, template

MARKER = "TPU_VLLM_METRICS_AGENT "
CONFIG_DIR = "/etc/google-cloud-ops-agent"
#: Google's repository script (Ops Agent docs "Install the agent", and ops-agent
#: integration_test/agents/agents.go, which runs it the same way with `--also-install`).
INSTALLER_URL = "https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh"
RECEIVER = "tpu_vllm"
#: What the collector runs on: `otel.yaml` in its RuntimeDirectory, generated from config.yaml
#: (ops-agent systemd/google-cloud-ops-agent-opentelemetry-collector.service; %t is /run).
OTEL_CONFIG = "/run/google-cloud-ops-agent-opentelemetry-collector/otel.yaml"
#: Between install tries: ops-agent integration_test/agents/agents.go RunInstallFuncWithRetry's
#: constant backoff (30 s, 5 retries).
INSTALL_RETRY_SECONDS = 30


def agent_config(config: ServerSections) -> dict[str, Any]:
    """/etc/google-cloud-ops-agent/config.yaml: one Prometheus receiver, defaults off."""
    interval = f"{config.monitoring.scrape_interval_seconds}s"
    return {
        "logging": {"service": {"pipelines": {"default_pipeline": {"receivers": []}}}},
        "metrics": {
            "receivers": {
                RECEIVER: {
                    "type": "prometheus",
                    "config": {
                        "scrape_configs": [
                            {
                                "job_name": vllm_metrics.job_name(config.stack),
                                "scrape_interval": interval,
                                # At most the interval, as Prometheus requires; 10 s is its default.
                                "scrape_timeout": "10s",
                                "metrics_path": "/metrics",
                                "static_configs": [{"targets": [f"localhost:{config.vllm.port}"]}],
                            }
                        ]
                    },
                }
            },
            "service": {
                "pipelines": {
                    "default_pipeline": {"receivers": []},
                    RECEIVER: {"receivers": [RECEIVER]},
                }
            },
        },
    }


#: How long the collector may take to come up after the agent's restart. Google's own tests
#: wait 10 s for it (ops-agent integration_test/agents/agents.go `RestartOpsAgent`); a fresh
#: node's first config generation can take longer.
COLLECTOR_WAIT_SECONDS = 60


def metrics_agent_script(
    config: ServerSections,
    config_dir: str = CONFIG_DIR,
    installer_url: str = INSTALLER_URL,
    *,
    otel_config: str = OTEL_CONFIG,
    retry_seconds: int = INSTALL_RETRY_SECONDS,
    collector_wait_seconds: int = COLLECTOR_WAIT_SECONDS,
) -> str:
    """The node-side script (`config_dir`, `installer_url`, `otel_config`, `retry_seconds`,
    `collector_wait_seconds`: where and how fast the tests run it)."""
    return HEADER + fill(
        template("ops_agent.sh"),
        {
            "CONFIG_DIR": shlex.quote(config_dir),
            "INSTALLER_URL": shlex.quote(installer_url),
            "OTEL_CONFIG": shlex.quote(otel_config),
            "RETRY_SECONDS": str(retry_seconds),
            "COLLECTOR_WAIT_SECONDS": str(collector_wait_seconds),
            "CONFIG_YAML": yaml.safe_dump(agent_config(config), sort_keys=False).rstrip("\n"),
            "PORT": str(config.vllm.port),
            "INTERVAL": str(config.monitoring.scrape_interval_seconds),
            "JOB": vllm_metrics.job_name(config.stack),
        },
    )


def parse_result(stdout: str | None) -> str:
    """ "ok", "failed: WHY", or "" when the script printed no result line."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARKER):
            return line[len(MARKER) :].strip()
    return ""
