"""The PodMonitoring that has Managed Service for Prometheus scrape the vLLM pods' /metrics.

Shape: GoogleCloudPlatform/prometheus-engine `examples/vllm/pod-monitoring.yaml`. Its name
becomes every series' `job` label (its `pkg/operator/apis/monitoring/v1/pod_config.go`), so it
is `tpu-vllm-STACK`, as on the VM.
"""

from __future__ import annotations

from typing import Any

from components import vllm_metrics
from components.config import WorkloadSections
from components.gke import k8s_manifests

API_VERSION = "monitoring.googleapis.com/v1"
KIND = "PodMonitoring"


def pod_monitoring(config: WorkloadSections) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": vllm_metrics.job_name(config.stack),
            "namespace": k8s_manifests.namespace_name(config.stack),
            "labels": k8s_manifests.labels(config),
        },
        "spec": {
            "selector": {"matchLabels": k8s_manifests.selector(config)},
            "endpoints": [
                {
                    "port": "http",  # the server's named port
                    "path": "/metrics",
                    "interval": f"{config.monitoring.scrape_interval_seconds}s",
                }
            ],
        },
    }
