"""The stack's own GKE ComputeClass: how its TPU nodes are requested, and recycled before they end.

A flex-start TPU node is deleted when its run ends (`tpu.maxRunDuration`). GKE's answer is a
ComputeClass priority with `flexStart.nodeRecycling.leadTimeSeconds`: the cluster autoscaler
starts looking for a replacement node that long before the node's termination timestamp (the
field's description in the CRD). So the stack owns one class, named after the stack, with one
priority that mirrors `tpu.provisioning`:

- flex-start: `flexStart: {enabled: true, nodeRecycling: {leadTimeSeconds: renewal.lead}}` and
  `maxRunDurationSeconds: tpu.maxRunDuration`;
- spot: `spot: true`; on-demand: `spot: false` (no run end, so nothing to recycle);

each with the slice's `machineType`, `tpu: {type, count, topology}` and `location.zones` =
`tpu.zones`, and `whenUnsatisfiable: DoNotScaleUp` (the fallback, E2 nodes, cannot run a TPU pod;
GKE's docs advise setting it explicitly because its default changed in 1.33).

Node pools are **created by the class** (`nodePoolAutoCreation.enabled: true`), not by the stack:
- `nodeRecycling` exists only on a declarative priority. The one way to name a pool the stack
  made is a `nodepools` priority, and the CRD refuses any other field beside it but
  `allocationStrategy` and `priorityScore` (its rule "Nodepool field cannot be set along with
  other nodepool configuration fields"; before June 2026 "... with other fields"), so a
  stack-made pool could not be recycled through the class.
- GoogleCloudPlatform/accelerated-platforms does the same for gemma-4-31b-it on v6e:
  platforms/gke/base/core/custom_compute_class/templates/manifests/tpu/v6e/
  custom-compute-tpu-v6e-2x2.yaml (`nodePoolAutoCreation.enabled`, a flexStart priority with
  `nodeRecycling.leadTimeSeconds: 3600`, `maxRunDurationSeconds`, `machineType`, `tpu`), selected
  by online-inference-tpu/vllm/v6e-gemma-4-31b-it/patch-nodeselector.yaml
  (`cloud.google.com/compute-class`).
- GKE docs "About custom ComputeClasses": from 1.33.3-gke.1136000 such a class creates pools
  without cluster-level node auto-provisioning (before, the cluster needs it); auto-created
  pools get the class's label and taint from GKE, where hand-made pools need
  `cloud.google.com/compute-class=NAME` as node label and `NAME:NoSchedule` taint.

Pods select the class with `nodeSelector: {cloud.google.com/compute-class: NAME}` (GKE docs,
"Request ComputeClasses in workloads") and tolerate its `NoSchedule` taint. GKE injects that
toleration itself for pods that select a class; the pod spec carries it too, so it does not
depend on the injection.

Schema: the CRD is GKE's own and no package ships it. The shapes used here were checked against
GKE's ComputeClass reference and the API's Go types (GoogleCloudPlatform/compute-class-api):
tests/support/compute_class_crd.py is the project's picture of that CRD, served by a real API server
in tests/kube/test_kube_compute_class.py, which accepts this module's classes as sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.config import WorkloadSections
from components.naming import resource_id

API_VERSION = "cloud.google.com/v1"
KIND = "ComputeClass"
#: The node label (and taint key) that ties nodes to a class; also the pods' node selector.
LABEL = "cloud.google.com/compute-class"


def class_name(stack: str) -> str:
    """One class per stack (classes are cluster-scoped; stacks may share a cluster). GKE refuses
    names beginning with `gke` or `autopilot`; ours begin with `tpu-vllm-`."""
    return resource_id(stack)


def node_selector(config: WorkloadSections) -> dict[str, str]:
    return {LABEL: class_name(config.stack)}


def toleration(config: WorkloadSections) -> dict[str, str]:
    """The class's taint, `cloud.google.com/compute-class=NAME:NoSchedule`, tolerated."""
    return {
        "key": LABEL,
        "operator": "Equal",
        "value": class_name(config.stack),
        "effect": "NoSchedule",
    }


def priority(config: WorkloadSections) -> dict[str, Any]:
    """The one priority rule: the slice, in `tpu.zones`, provisioned as `tpu.provisioning`."""
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
    """The ComputeClass manifest (cluster-scoped: no namespace)."""
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
