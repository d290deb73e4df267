"""The node's metrics agent: Google's Ops Agent scraping vLLM's /metrics into Cloud Monitoring.

The Ops Agent is Google's documented Prometheus collector on Compute Engine (Cloud Monitoring
"Collect Prometheus metrics") and writes through Managed Service for Prometheus, so the same
PromQL reads the VM's series and GKE's (components/vllm_metrics.py). It supports Ubuntu 22.04
(ops-agent `project.yaml`, `jammy`), which third-party setup scripts (not verified here) say the
TPU runtimes are. Installed after the readiness check: docs/operations.md, "Watch it serve".
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
#: Ops Agent docs "Install the agent"; ops-agent integration_test/agents/agents.go runs it so too.
INSTALLER_URL = "https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh"
RECEIVER = "tpu_vllm"
#: Generated from config.yaml (ops-agent systemd/google-cloud-ops-agent-opentelemetry-collector).
OTEL_CONFIG = "/run/google-cloud-ops-agent-opentelemetry-collector/otel.yaml"
#: As ops-agent integration_test/agents/agents.go RunInstallFuncWithRetry (30 s, 5 retries).
INSTALL_RETRY_SECONDS = 30


def agent_config(config: ServerSections) -> dict[str, Any]:
    """config.yaml: one Prometheus receiver; the default pipelines (billed, not needed) off."""
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


#: Google's tests wait 10 s for the collector (agents.go `RestartOpsAgent`); a fresh node can
#: take longer.
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
    """The node-side script; the keyword arguments are for tests."""
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
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARKER):
            return line[len(MARKER) :].strip()
    return ""
