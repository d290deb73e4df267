"""The PodMonitoring that has Managed Service for Prometheus scrape the vLLM pods' /metrics.

Shape: GoogleCloudPlatform/prometheus-engine `examples/vllm/pod-monitoring.yaml` (the manifest
Cloud Monitoring's vLLM exporter page applies): `monitoring.googleapis.com/v1` PodMonitoring,
`spec.selector.matchLabels` picking the server pods, `spec.endpoints[]` with `port`, `path`,
`interval`; accepted under that CRD (prometheus-engine
`charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml`, from its Go module) by a
real API server with strict field validation in tests/kube/test_kube_gke_objects.py.
Its name becomes the `job` label of every series (prometheus-engine
`pkg/operator/apis/monitoring/v1/pod_config.go`), so it is `tpu-vllm-STACK`, as on the VM.
"""

from __future__ import annotations

from typing import Any

from components import vllm_metrics
from components.config import WorkloadSections
from components.gke import k8s_manifests as m

API_VERSION = "monitoring.googleapis.com/v1"
KIND = "PodMonitoring"


def pod_monitoring(config: WorkloadSections) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": vllm_metrics.job_name(config.stack),
            "namespace": m.namespace_name(config.stack),
            "labels": m.labels(config),
        },
        "spec": {
            "selector": {"matchLabels": m.selector(config)},
            "endpoints": [
                {
                    "port": "http",  # the server container's named port
                    "path": "/metrics",
                    "interval": f"{config.monitoring.scrape_interval_seconds}s",
                }
            ],
        },
    }
