"""Node auto-provisioning's resource limits on an existing cluster, under Pulumi mocks.

Modelled on GKE docs "Configure node pool auto-creation" (Limitations: the limits set with
node auto-provisioning also apply to the pools GKE creates for a ComputeClass) and "About node
auto-provisioning" (Resource limits: no node is created that would exceed one, counted over all
node pools). The mocked `getCluster` answers `clusterAutoscalings[].resourceLimits` in the
shape pulumi-gcp 10.2's `GetClusterClusterAutoscalingResourceLimitResult` reads
(`resourceType`, `minimum`, `maximum`; cpu in vCPUs, memory in GB, accelerators in chips as
cluster-toolkit's `pkg/config/autoscaling.go` counts them).
"""

from __future__ import annotations

from typing import Any

import pytest

from components import catalog
from components.config import ConfigError
from tests.support.gke_manifests import V5E1_ON_GKE
from tests.support.mock_outputs import existing_cluster
from tests.support.pulumi_program import run_program

STACK = "v6e4-gke"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
SHARED = {"tpu-vllm:gke.cluster": "shared"}
V6E4 = catalog.GKE_MACHINE_SHAPES["ct6e-standard-4t"]


def autoprovisioning(**maxima: float) -> list[dict[str, Any]]:
    """`clusterAutoscalings` of a cluster with node auto-provisioning on and these maxima."""
    limits = [{"resourceType": k, "minimum": 0, "maximum": v} for k, v in maxima.items()]
    return [{"enabled": True, "autoscalingProfile": "BALANCED", "resourceLimits": limits}]


def refusal(changes: dict[str, Any], **maxima: float) -> str:
    run = run_program(
        STACK,
        {**SHARED, **changes},
        call=existing_cluster(clusterAutoscalings=autoprovisioning(**maxima)),
        expect_error=True,
    )
    assert isinstance(run.error, ConfigError), run.error
    assert run.resources == []  # refused before any resource
    return str(run.error)


@pytest.mark.parametrize(
    ("maxima", "named"),
    [
        ({"cpu": 200, "memory": 100000}, ["`cpu` maximum 200 < 720 vCPUs", "--max-cpu 720"]),
        ({"cpu": 100000, "memory": 800}, ["`memory` maximum 800 < 2880 GB", "--max-memory 2880"]),
        (
            {"cpu": 100000, "memory": 100000, "tpu-v6e-slice": 12},
            ["`tpu-v6e-slice` maximum 12 < 16 TPU chips", "--autoprovisioning-config-file"],
        ),
    ],
    ids=["cpu", "memory", "tpu"],
)
def test_limits_too_small_for_the_replicas_a_spare_and_a_recycling_node_refuse(
    maxima: dict[str, float], named: list[str]
) -> None:
    """2 flex-start v6e-4 replicas: 2 nodes, 1 more for an update's spare replica (maxSurge 1),
    and 1 more while recycling replaces one (a recycle may fall inside a rollout) = 4 x
    (180 vCPUs, 720 GB, 4 chips)."""
    message = refusal({}, **maxima)
    assert "tpu-vllm:gke.cluster" in message and "tpu-vllm:gke.replicas" in message
    assert "node auto-provisioning" in message and "4 ct6e-standard-4t nodes" in message
    assert "+ 1 that an update starts beside them" in message
    assert "Fix: raise the limits" in message
    assert "gcloud container clusters update shared --location us-east5" in message
    for text in named:
        assert text in message


def test_enough_room_passes_and_registers_the_class() -> None:
    need = 4
    run = run_program(
        STACK,
        SHARED,
        call=existing_cluster(
            clusterAutoscalings=autoprovisioning(
                cpu=need * V6E4.vcpus, memory=need * V6E4.memory_gb, **{"tpu-v6e-slice": 16}
            )
        ),
    )
    assert run.error is None
    assert len(run.of_type(COMPUTE_CLASS)) == 1


def test_without_flex_start_there_is_no_recycling_node_to_count() -> None:
    """Spot nodes end without a replacement sought ahead: 2 replicas and an update's spare
    fit 3 x 180 vCPUs."""
    spot = {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    maxima = {"cpu": 3 * V6E4.vcpus, "memory": 3 * V6E4.memory_gb}
    run = run_program(
        STACK,
        {**SHARED, **spot},
        call=existing_cluster(clusterAutoscalings=autoprovisioning(**maxima)),
    )
    assert run.error is None
    more = refusal({**spot, "tpu-vllm:gke.replicas": 3}, **maxima)
    assert "4 ct6e-standard-4t nodes (3 for tpu-vllm:gke.replicas + 1 that an update" in more
    assert "recycling" not in more


def test_v5e_counts_either_name_of_its_tpu_resource_type() -> None:
    """xpk and accelerated-platforms name the v5e limit `tpu-v5-lite-podslice`, cluster-toolkit
    `tpu-v5e-slice`: either binds."""
    v5e = {
        **V5E1_ON_GKE,
        "tpu-vllm:gke.cluster": "projects/test-project/locations/us-west4/clusters/shared",
    }
    roomy = {"cpu": 100000, "memory": 100000}
    for name in ("tpu-v5-lite-podslice", "tpu-v5e-slice"):
        assert "maximum 3 < 4 TPU chips" in refusal(v5e, **roomy, **{name: 3})


def test_auto_provisioning_off_is_not_judged_by_its_limits() -> None:
    off = [{"enabled": False, "resourceLimits": [{"resourceType": "cpu", "maximum": 1}]}]
    run = run_program(STACK, SHARED, call=existing_cluster(clusterAutoscalings=off))
    assert run.error is None


def test_no_tpu_limit_warns_naming_the_type_and_how_to_set_it() -> None:
    """Unsettled whether GKE reads a missing TPU limit as 0: a warning, not a refusal."""
    roomy = {"cpu": 100000, "memory": 100000}
    run = run_program(
        STACK, SHARED, call=existing_cluster(clusterAutoscalings=autoprovisioning(**roomy))
    )
    assert run.error is None and len(run.of_type(COMPUTE_CLASS)) == 1
    [warning] = [w for w in run.warnings if "name no `tpu-v6e-slice`" in w]
    assert "tpu-vllm:gke.cluster" in warning
    assert "{resourceType: tpu-v6e-slice, maximum: 16}" in warning  # 4 nodes x 4 chips
    assert "--autoprovisioning-config-file" in warning
    with_limit = run_program(
        STACK,
        SHARED,
        call=existing_cluster(
            clusterAutoscalings=autoprovisioning(**roomy, **{"tpu-v6e-slice": 16})
        ),
    )
    assert not any("name no" in w for w in with_limit.warnings)
