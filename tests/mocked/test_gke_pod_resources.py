"""The GKE pods' CPU and memory, `/dev/shm`, and security contexts, as the program renders them.

The same pods on a real API server (their QoS class, their placement on GKE-shaped nodes, and
Pod Security admission): tests/kube/test_kube_pod_policy.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from components import catalog
from components.catalog import CHIPS
from components.config.model import ModelSettings
from components.gke import pod_resources
from tests.support.gke_manifests import V5E1_ON_GKE
from tests.support.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"


def pod(run: ProgramRun, kind: str) -> dict[str, Any]:
    [found] = [r.inputs for r in run.resources if r.type == f"kubernetes:{kind}"]
    return dict(found["spec"]["template"]["spec"])


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    every = [*spec["containers"], *spec.get("initContainers", [])]
    [found] = [c for c in every if c["name"] == name]
    return dict(found)


@pytest.fixture(scope="module")
def v6e4() -> ProgramRun:
    return run_program(STACK)


@pytest.fixture(scope="module")
def v5e1() -> ProgramRun:
    return run_program(STACK, V5E1_ON_GKE)


def test_gke_reservations_match_googles_worked_example() -> None:
    """GKE docs "Plan GKE node sizes": 25% of the first 4 GiB, 20% of the next 4, 10% of the
    next 8, 6% of the next 112, 2% above 128, and 100 MiB for eviction. A 150 GiB node keeps
    9.8577 GiB and offers 140.1423 GiB (the same bands, worked through by hand)."""
    assert pod_resources.allocatable_memory_gib(150) == pytest.approx(140.1423, abs=1e-4)
    # CPU: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4.
    assert pod_resources.allocatable_cpu(24) == pytest.approx(24 - 0.06 - 0.01 - 0.01 - 0.05)


@pytest.mark.parametrize(
    ("fixture", "want"),
    [
        # ct6e-standard-4t, 720 GB: 31B's 58.25 GiB checkpoint in /dev/shm (65 GiB with
        # headroom), once more while loading, 6 GiB of runtime: 130 GiB of ~647 GiB.
        ("v6e4", ("89", "130Gi", "647Gi", "65Gi")),
        # ct5lp-hightpu-1t, 48 GB: E2B's 9.54 GiB checkpoint: 27 GiB of ~37 GiB.
        ("v5e1", ("11", "27Gi", "37Gi", "11Gi")),
    ],
)
def test_the_server_asks_for_cpu_and_memory_sized_from_node_and_weights(
    request: pytest.FixtureRequest, fixture: str, want: tuple[str, str, str, str]
) -> None:
    """Not BestEffort: requests make the pod Burstable, the limit is the
    node's budget, no CPU limit, and `/dev/shm` is a memory emptyDir with a sizeLimit."""
    cpu, memory, limit, shm = want
    run: ProgramRun = request.getfixturevalue(fixture)
    spec = pod(run, "apps/v1:Deployment")
    resources = container(spec, "vllm")["resources"]
    assert resources["requests"]["cpu"] == cpu
    assert resources["requests"]["memory"] == memory
    assert resources["limits"]["memory"] == limit
    assert "cpu" not in resources["limits"]
    [dshm] = [v for v in spec["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}


def test_the_cache_containers_and_the_job_ask_for_a_little() -> None:
    run = run_program(STACK)
    spec = pod(run, "apps/v1:Deployment")
    for name in ("xla-cache-restore", "xla-cache-save"):
        assert container(spec, name)["resources"] == {
            "requests": {"cpu": "250m", "memory": "512Mi"}
        }
    job = container(pod(run, "batch/v1:Job"), "wait-ready")
    assert job["resources"]["limits"]["memory"] == job["resources"]["requests"]["memory"]


@pytest.mark.parametrize("name", sorted(catalog.GKE_TPUS))
def test_whatever_fits_the_chips_hbm_makes_a_pod_its_node_takes(name: str) -> None:
    """The HBM check (components/config/model.py) bounds the weights; at its largest (0.99 of
    HBM) the server's request still fits the node's budget (on a v5e-1 host by taking all of
    it), so no stack the config accepts makes a pod no node can take."""
    chip = CHIPS[name]
    largest = ModelSettings(id="any/model", weights_gib=chip.hbm_gib * 0.99)
    resources = pod_resources.server_resources(chip, largest)
    request = int(resources["requests"]["memory"].removesuffix("Gi"))
    # With the sidecar's request beside it, the pod still fits the budget plus the DaemonSets'
    # allowance, i.e. the node's allocatable.
    assert request + 0.5 <= pod_resources.node_budget(chip).memory_gib + 3
    assert request <= pod_resources.node_budget(chip).memory_gib
    if pod_resources.server_memory_gib(largest) > request:
        # Capped: no limit the sizing says the server could cross while loading.
        assert "memory" not in resources["limits"]
    else:
        assert request <= int(resources["limits"]["memory"].removesuffix("Gi"))


def test_security_contexts(v6e4: ProgramRun) -> None:
    """The server: no privilege escalation, RuntimeDefault seccomp (baseline and as much of
    restricted as a root TPU server allows); the Job: restricted in full."""
    spec = pod(v6e4, "apps/v1:Deployment")
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for name in ("vllm", "xla-cache-restore", "xla-cache-save"):
        assert container(spec, name)["securityContext"] == {"allowPrivilegeEscalation": False}
    job = pod(v6e4, "batch/v1:Job")
    assert job["securityContext"]["runAsNonRoot"] is True
    assert job["securityContext"]["runAsUser"] != 0
    wait = container(job, "wait-ready")
    assert wait["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert wait["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in wait["volumeMounts"]


def test_the_namespace_declares_the_level_its_pods_meet(v6e4: ProgramRun) -> None:
    [ns] = [r.inputs for r in v6e4.resources if r.type == "kubernetes:core/v1:Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
