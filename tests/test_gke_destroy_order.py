"""`pulumi destroy` of a GKE stack removes the server pods before what they use (issue 22, 5).

The order of the deletes is the engine's (tests/engine_order.py `destroy`, from pulumi's
`ScheduleDeletes`: a resource is deleted only once everything that depends on it is), over the
dependencies the program declares under mocks. What each delete waits for is a model of the two
systems that decide it, written from their sources:

- pulumi-kubernetes (`provider/pkg/await/await.go` `Deletion`; `provider/pkg/metadata/
  overrides.go`): it deletes with the propagation `pulumi.com/deletionPropagation` names,
  foreground by default, then waits until the object is gone, except when the object carries
  `pulumi.com/skipAwait: "true"` and its kind is one `allowsSkipAwaitWithDelete` lists
  (Namespace, Pod, ReplicationController, DaemonSet, Deployment, StatefulSet, Job): then the
  delete returns at once.
- Kubernetes' garbage collector (`pkg/controller/garbagecollector/garbagecollector.go`): an object
  deleted in the foreground stays until its dependents that block owner deletion are gone, and
  those are deleted in the foreground too (`attemptToDeleteItem`, `processDeletingDependentsItem`).
  A Deployment's ReplicaSets and their pods hold such blocking controller references
  (apimachinery `NewControllerRef`), so a Deployment deleted in the foreground is gone only once
  its pods are; an object the Deployment names in `metadata.ownerReferences` with
  `blockOwnerDeletion: true` is gone only once the Deployment is. A Namespace is gone only once
  everything in it is (the namespace controller).

Pods are "alive" until a delete that waits for them has run; a delete that returns at once lets
no time pass. So a resource the pods use is safe only if a delete that waits for the pods is
among what must finish before its own.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from components.gke import pod_owner
from tests.engine_order import destroy
from tests.mock_outputs import k8s_name
from tests.pulumi_program import ProgramRun, Registered, run_program
from tests.test_gke_backend import existing_cluster

STACK = "v6e4-gke"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLASS_LABEL = "cloud.google.com/compute-class"
#: overrides.go `allowsSkipAwaitWithDelete`: kinds whose delete skipAwait also skips.
SKIP_AWAIT_SKIPS_DELETE = {
    "Namespace",
    "Pod",
    "ReplicationController",
    "DaemonSet",
    "Deployment",
    "StatefulSet",
    "Job",
}

VARIANTS: dict[str, dict[str, Any]] = {
    "created-cluster": {},
    "cache-off": {"changes": {"tpu-vllm:cache.enabled": False}},
    "shared-cluster": {"changes": {"tpu-vllm:gke.cluster": "shared"}, "call": existing_cluster()},
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request: pytest.FixtureRequest) -> ProgramRun:
    variant = VARIANTS[request.param]
    return run_program(STACK, variant.get("changes"), call=variant.get("call"))


def kind(resource: Registered) -> str:
    return resource.type.rsplit(":", 1)[-1] if resource.type.startswith("kubernetes:") else ""


def annotations_of(resource: Registered) -> dict[str, Any]:
    return dict((resource.inputs.get("metadata") or {}).get("annotations") or {})


def delete_awaited(resource: Registered) -> bool:
    """pulumi-kubernetes waits for the object to be gone (`DeletedCondition` not immediate)."""
    skip = annotations_of(resource).get("pulumi.com/skipAwait") == "true"
    return bool(kind(resource)) and not (skip and kind(resource) in SKIP_AWAIT_SKIPS_DELETE)


def foreground(resource: Registered) -> bool:
    """`metadata.DeletionPropagation`: foreground unless the annotation says orphan/background."""
    policy = str(annotations_of(resource).get("pulumi.com/deletionPropagation", "")).lower()
    return policy not in ("orphan", "background")


def deployment_owners(run: ProgramRun) -> set[str]:
    """The resources the Deployment names as blocking owners, by kind and name."""
    deployment = run.one(DEPLOYMENT)
    refs = deployment.inputs["metadata"].get("ownerReferences") or []
    blocking = {(r["kind"], r["name"]) for r in refs if r.get("blockOwnerDeletion") is True}
    return {
        r.name
        for r in run.resources
        if (kind(r), k8s_name(r.name, r.inputs.get("metadata") or {})) in blocking
    }


def waits_for_the_pods(run: ProgramRun, name: str) -> bool:
    """Whether deleting `name` returns only once the server pods are gone (the model above)."""
    found = [r for r in run.resources if r.name == name]  # not the root stack
    if not found:
        return False
    [resource] = found
    if not delete_awaited(resource) or not foreground(resource):
        return False
    deployment = run.one(DEPLOYMENT)
    if name == deployment.name or kind(resource) == "Namespace":
        return True
    # An owner waits for the Deployment; the Deployment (deleted by the engine first, with its
    # own propagation) is gone only after its pods if that propagation is foreground.
    return name in deployment_owners(run) and foreground(deployment)


def used_by_the_server_pods(run: ProgramRun) -> set[str]:
    """What the server pods need while they run, read from the manifests: their class, KSA,
    ConfigMaps, SecretProviderClasses, the Role they read their status with, and the Google
    grants that give their Workload Identity its access."""
    [pod] = [run.one(DEPLOYMENT).inputs["spec"]["template"]["spec"]]
    ns = run.one(DEPLOYMENT).inputs["metadata"]["namespace"]
    ksa = pod["serviceAccountName"]
    maps = {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
    spcs = {
        v["csi"]["volumeAttributes"]["secretProviderClass"] for v in pod["volumes"] if "csi" in v
    }
    [account] = [r for r in run.resources if kind(r) == "ServiceAccount"]
    gsa = account.inputs["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    pod_roles = {
        r.inputs["metadata"]["name"]
        for r in run.resources
        if kind(r) == "Role" and any("pods" in rule["resources"] for rule in r.inputs["rules"])
    }
    used: set[str] = set()
    for r in run.resources:
        name = (r.inputs.get("metadata") or {}).get("name")
        member = str(r.inputs.get("member", ""))
        if (
            (kind(r) == "ComputeClass" and name == pod["nodeSelector"][CLASS_LABEL])
            or (kind(r) == "ServiceAccount" and name == ksa)
            or (kind(r) == "ConfigMap" and name in maps)
            or (kind(r) == "SecretProviderClass" and name in spcs)
            or (kind(r) in ("Role", "RoleBinding") and name in pod_roles)
            or member.endswith(f"[{ns}/{ksa}]")  # the Workload Identity binding
            or (r.type.startswith("gcp:") and member == f"serviceAccount:{gsa}")  # the grants
        ):
            used.add(r.name)
    return used


def test_the_delete_model_follows_the_provider() -> None:
    def resource(kind_: str, notes: dict[str, str]) -> Registered:
        metadata = {"metadata": {"annotations": notes}}
        return Registered(f"kubernetes:x/v1:{kind_}", "r", metadata, True, "")

    skip = {"pulumi.com/skipAwait": "true"}
    assert not delete_awaited(resource("Deployment", skip))  # the skipAwait exception
    assert delete_awaited(resource("ConfigMap", skip))  # not in allowsSkipAwaitWithDelete
    assert delete_awaited(resource("Deployment", {}))
    assert not foreground(resource("ConfigMap", {"pulumi.com/deletionPropagation": "Background"}))


def test_what_the_pods_use_is_found_in_every_variant(run: ProgramRun) -> None:
    used = used_by_the_server_pods(run)
    expected = {
        "vllm-compute-class",
        "vllm-ksa",
        "vllm-scripts",
        "vllm-server-secrets",
        "gke-workload-identity",
        "secrets-hf-token-access",
        "secrets-api-key-access",
    }
    assert expected <= used
    cache = "cache_restore.sh" in run.named("vllm-scripts").inputs["data"]
    assert ("compile-cache-node-writer" in used) is cache


def test_destroy_deletes_what_the_pods_use_only_after_the_pods_are_gone(run: ProgramRun) -> None:
    """Under the engine's order, every delete of something the pods use starts after a delete
    that waited for the pods; with the Deployment's skipAwait alone, it would start while they
    terminate."""
    alive = {"pods": True}
    seen: dict[str, bool] = {}
    lock = threading.Lock()

    def delete(name: str) -> None:
        with lock:
            seen[name] = alive["pods"]
            if waits_for_the_pods(run, name):
                alive["pods"] = False  # this delete returns only once they are gone

    destroy(run.dependencies, delete)
    used = used_by_the_server_pods(run)
    assert used <= set(seen)
    assert {name for name in used if seen[name]} == set()
    assert seen[run.one(DEPLOYMENT).name] is True  # the pods run until their Deployment goes


def test_the_pods_owner_is_what_waits_and_can_never_take_the_server_with_it(
    run: ProgramRun,
) -> None:
    """The Deployment keeps skipAwait (its delete returns at once); the owner it names is
    deleted in the foreground and awaited, within a timeout. It is auto-named and holds no data:
    pulumi-kubernetes replaces a ConfigMap on a data change (`diff.go` `forceNewProperties`) and
    deletes a fixed-name replacement first (`provider.go` `deleteBeforeReplace`), which would
    delete the Deployment with it; auto-named, a replacement is created first."""
    deployment = run.one(DEPLOYMENT)
    assert not delete_awaited(deployment)  # skipAwait stays: see components/gke/k8s_workload.py
    [owner] = deployment_owners(run)
    assert waits_for_the_pods(run, owner)
    resource = run.named(owner)
    assert resource.type == "kubernetes:core/v1:ConfigMap"
    assert "name" not in resource.inputs["metadata"]
    assert not resource.inputs.get("data") and not resource.inputs.get("binaryData")
    assert owner in run.dependencies[deployment.name]
    [ref] = deployment.inputs["metadata"]["ownerReferences"]
    assert ref["uid"] and not ref.get("controller")
    assert pod_owner.DELETE_TIMEOUT == "15m"
