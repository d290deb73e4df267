"""The Kubernetes objects the GKE backend sends, in every variant: which kinds, and the one
relation between them no server checks (a flex-start node's replacement is sought before its run
ends).

Whether the objects are *valid* is the real API server's to say: tests/kube/test_kube_gke_objects.py
creates every variant's objects on kube-apiserver v1.34 with strict field validation, and
tests/kube/test_kube_compute_class.py judges the ComputeClass against the project's picture of
GKE's CRD. The offline validators this file used before (kubernetes-validate's bundled schemas
and a transcribed ComputeClass JSON schema) are retired: the server now proves what they
approximated (docs/testing.md, "The Kubernetes layer").
"""

from __future__ import annotations

import pytest

from tests.support.gke_manifests import STACK, VARIANTS, manifests
from tests.support.pulumi_program import ProgramRun, run_program


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request: pytest.FixtureRequest) -> ProgramRun:
    return run_program(STACK, VARIANTS[request.param])


def test_the_backend_sends_the_objects_it_should(run: ProgramRun) -> None:
    kinds = sorted(m["kind"] for m in manifests(run))
    # The pod-reader Role and its binding come with the compile cache (the image digest).
    cache = ["Role", "RoleBinding"] if kinds.count("Role") == 2 else []
    assert kinds == sorted(
        [
            "ComputeClass",
            "ConfigMap",
            "ConfigMap",  # the pods' owner (components/gke/pod_owner.py)
            "Deployment",
            "PodDisruptionBudget",
            "Job",
            "Namespace",
            "SecretProviderClass",
            "SecretProviderClass",
            "Service",
            "ServiceAccount",
            # The readiness Job's right to read the Deployment's rollout.
            "Role",
            "RoleBinding",
            *cache,
            "PodMonitoring",  # every variant monitors, on a created cluster
        ]
    )


def test_a_flex_start_nodes_replacement_is_sought_before_its_run_ends(run: ProgramRun) -> None:
    [manifest] = [m for m in manifests(run) if m["kind"] == "ComputeClass"]
    [priority] = manifest["spec"]["priorities"]
    if "flexStart" in priority:
        lead = priority["flexStart"]["nodeRecycling"]["leadTimeSeconds"]
        assert 0 < lead < priority["maxRunDurationSeconds"]
