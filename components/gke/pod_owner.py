"""The object the server Deployment hangs from, so that `pulumi destroy` removes the pods before
what they use.

skipAwait makes the Deployment's delete return at once; this ConfigMap's delete waits until the
garbage collector has removed the Deployment and its pods, and what the pods use depends on it.
It holds no data and has no fixed name, so it is replaced create-before-delete. Why and how:
docs/gke.md "Destroy".
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.config import WorkloadSections
from components.gke.k8s_manifests import labels, namespace_name

API_VERSION = "v1"
KIND = "ConfigMap"
#: For the pods to be gone (30 s grace each, normally).
DELETE_TIMEOUT = "15m"
PURPOSE = (
    "Owns the tpu-vllm server Deployment so that pulumi destroy removes its pods before what "
    "they use (components/gke/pod_owner.py). Deleting it deletes the server."
)


def pods_owner(config: WorkloadSections) -> dict[str, Any]:
    """Without `metadata.name`: pulumi-kubernetes names it (`NAME-xxxxxxxx`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "namespace": namespace_name(config.stack),
            "labels": labels(config),
            "annotations": {"tpu-vllm/purpose": PURPOSE},
        },
    }


def owner_reference(name: pulumi.Input[str], uid: pulumi.Input[str]) -> dict[str, Any]:
    """Blocking, so the owner's foreground delete waits for the Deployment; not a controller."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": True,
    }
