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
from tests.support.mock_outputs import existing_cluster, k8s_name
from tests.support.pulumi_program import ProgramRun, run_program
from tests.support.server_pod_uses import DEPLOYMENT, kind, used_by_the_server_pods

STACK = "v6e4-gke"
VARIANTS: dict[str, dict[str, Any]] = {
    "created-cluster": {},
    "cache-off": {"changes": {"tpu-vllm:cache.enabled": False}},
    "shared-cluster": {"changes": {"tpu-vllm:gke.cluster": "shared"}, "call": existing_cluster()},
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request: pytest.FixtureRequest) -> ProgramRun:
    variant = VARIANTS[request.param]
    return run_program(STACK, variant.get("changes"), call=variant.get("call"))


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
