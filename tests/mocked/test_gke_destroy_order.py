"""What `pulumi destroy` of a GKE stack relies on, in every variant the program renders: which
resources the server pods use while they run, and the auto-named owner whose foreground delete
holds the destroy until the pods are gone (components/gke/pod_owner.py).

That the destroy really removes the pods before what they use is proven by the real engine, the
real pulumi-kubernetes provider and the real garbage collector:
tests/engine/test_kube_engine_gke.py's destroy step watches the API server while it runs. The model
of their delete logic that stood here (pulumi-kubernetes' `allowsSkipAwaitWithDelete` and
propagation, the garbage collector's foreground deletion, the engine's `ScheduleDeletes`) is retired
(docs/testing.md, "The Kubernetes layer").
"""

from __future__ import annotations

from typing import Any

import pytest

from components.gke import pod_owner
from tests.mocked.test_gke_backend import existing_cluster
from tests.support.mock_outputs import k8s_name
from tests.support.pulumi_program import ProgramRun, Registered, run_program

STACK = "v6e4-gke"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLASS_LABEL = "cloud.google.com/compute-class"
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


def test_the_pods_owner_is_what_waits_and_can_never_take_the_server_with_it(
    run: ProgramRun,
) -> None:
    """The Deployment keeps skipAwait (its delete returns at once); the owner it names is
    deleted in the foreground and awaited, within a timeout. It is auto-named and holds no data:
    pulumi-kubernetes replaces a ConfigMap on a data change (`diff.go` `forceNewProperties`) and
    deletes a fixed-name replacement first (`provider.go` `deleteBeforeReplace`), which would
    delete the Deployment with it; auto-named, a replacement is created first."""
    deployment = run.one(DEPLOYMENT)
    annotations = deployment.inputs["metadata"].get("annotations") or {}
    # skipAwait stays (components/gke/k8s_workload.py): the Deployment's delete returns at once.
    assert annotations.get("pulumi.com/skipAwait") == "true"
    [owner] = deployment_owners(run)
    resource = run.named(owner)
    owner_notes = resource.inputs["metadata"].get("annotations") or {}
    # Deleted in the foreground (pulumi-kubernetes' default: `provider/pkg/metadata/
    # overrides.go` `DeletionPropagation`, annotation `pulumi.com/deletionPropagationPolicy`) and
    # awaited: no skipAwait on it.
    assert "pulumi.com/skipAwait" not in owner_notes
    assert "pulumi.com/deletionPropagationPolicy" not in owner_notes
    assert resource.type == "kubernetes:core/v1:ConfigMap"
    assert "name" not in resource.inputs["metadata"]
    assert not resource.inputs.get("data") and not resource.inputs.get("binaryData")
    assert owner in run.dependencies[deployment.name]
    [ref] = deployment.inputs["metadata"]["ownerReferences"]
    assert ref["uid"] and not ref.get("controller")
    assert pod_owner.DELETE_TIMEOUT == "15m"
