"""The stack's own GKE ComputeClass: how its TPU nodes are requested, and recycled before they end.

GKE creates the node pools from the class (`nodePoolAutoCreation`), since node recycling
(`flexStart.nodeRecycling.leadTimeSeconds`) exists only on a priority that describes the nodes,
never on one naming a pool the stack made. Why and sources: docs/gke.md "What it creates"; the
CRD's shape: tests/support/compute_class_crd.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.config import WorkloadSections
from components.naming import resource_id

API_VERSION = "cloud.google.com/v1"
KIND = "ComputeClass"
#: The node label and taint key that tie nodes to a class.
LABEL = "cloud.google.com/compute-class"


def class_name(stack: str) -> str:
    """One per stack: classes are cluster-scoped. GKE refuses names beginning with `gke` or
    `autopilot`; ours begin with `tpu-vllm-`."""
    return resource_id(stack)


def node_selector(config: WorkloadSections) -> dict[str, str]:
    return {LABEL: class_name(config.stack)}


def toleration(config: WorkloadSections) -> dict[str, str]:
    """GKE injects it into pods that select the class; carried so as not to depend on that."""
    return {
        "key": LABEL,
        "operator": "Equal",
        "value": class_name(config.stack),
        "effect": "NoSchedule",
    }


def priority(config: WorkloadSections) -> dict[str, Any]:
    """The slice, in `tpu.zones`, provisioned as `tpu.provisioning`."""
    tpu = config.tpu
    gke = tpu.chip.gke
    assert gke is not None  # validated: backend gke needs a GKE machine type
    rule: dict[str, Any] = {
        "machineType": gke.machine_type,
        "tpu": {"type": gke.accelerator, "count": tpu.chip.chips, "topology": gke.topology},
        "location": {"zones": list(tpu.zones)},
    }
    if tpu.provisioning == "flex-start":
        assert tpu.max_run_seconds is not None  # validated: flex-start needs a run limit
        rule["flexStart"] = {
            "enabled": True,
            "nodeRecycling": {"leadTimeSeconds": config.renewal.lead_seconds},
        }
        rule["maxRunDurationSeconds"] = tpu.max_run_seconds
    else:
        rule["spot"] = tpu.provisioning == "spot"
    return rule


def compute_class(config: WorkloadSections, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": class_name(config.stack), "labels": dict(labels)},
        "spec": {
            "nodePoolAutoCreation": {"enabled": True},
            "priorities": [priority(config)],
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }
