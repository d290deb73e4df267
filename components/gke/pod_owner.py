"""The object the server Deployment hangs from, so that `pulumi destroy` removes the pods before
what they use.

Why it is needed: the Deployment carries `pulumi.com/skipAwait` (creates and refreshes must not
wait for every replica, components/gke/k8s_workload.py), and for a Deployment that annotation
also makes the delete return at once (pulumi/pulumi-kubernetes
`provider/pkg/metadata/overrides.go`: `DeletedCondition` is immediate when skipAwait is set and
`allowsSkipAwaitWithDelete` lists the kind, which it does for Deployment, Job, Pod, ...). The
engine deletes a resource only after everything that depends on it, so the moment the
Deployment's delete returned, it would delete the ComputeClass, the Workload Identity binding,
the secret grants and the SecretProviderClass while the pods still terminate: a sidecar's save
refused, a node taken from under its pod. On a shared cluster (`gke.cluster`) too, since nothing
else deletes the pods.

How it waits: the Deployment names this ConfigMap in `metadata.ownerReferences` with
`blockOwnerDeletion: true`. pulumi-kubernetes deletes it with the default foreground
propagation and, as a ConfigMap has no skipAwait exception, waits until it is gone
(`provider/pkg/await/await.go` `Deletion`, `condition.NewDeleted`). Kubernetes' garbage collector
keeps a foreground-deleted object until its blocking dependents are gone, and deletes those in the
foreground too (kubernetes `pkg/controller/garbagecollector/garbagecollector.go`,
`processDeletingDependentsItem`, `attemptToDeleteItem`): the Deployment waits for its
ReplicaSets, which wait for their pods (their controller references block deletion:
apimachinery `NewControllerRef`). So this delete ends once no server pod is left, and what the pods
use is a dependency of this object (components/gke/k8s_workload.py), deleted after it.

It holds no data and no name of its own: a ConfigMap's data is replaced, not updated
(pulumi-kubernetes `provider/pkg/provider/diff.go`, `forceNewProperties`), and a replacement
with a fixed name is deleted first (`provider.go`, `deleteBeforeReplace`), which would take the
Deployment with it. Auto-named, it is replaced create-before-delete: the Deployment moves to the
new owner before the old one goes.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.config import WorkloadSections
from components.gke.k8s_manifests import labels, namespace_name

API_VERSION = "v1"
KIND = "ConfigMap"
#: How long `pulumi destroy` waits for the pods to be gone (30 s grace each, normally).
DELETE_TIMEOUT = "15m"
PURPOSE = (
    "Owns the tpu-vllm server Deployment so that pulumi destroy removes its pods before what "
    "they use (components/gke/pod_owner.py). Deleting it deletes the server."
)


def pods_owner(config: WorkloadSections) -> dict[str, Any]:
    """The ConfigMap, without `metadata.name`: pulumi-kubernetes names it (`NAME-xxxxxxxx`)."""
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
    """The Deployment's reference to its owner: blocking, so a foreground delete of the owner
    waits for the Deployment (and so for its pods); not a controller reference."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": True,
    }
