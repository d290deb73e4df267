"""CPU and memory for the GKE pods, sized from the TPU node's machine shape and the model.

A pod that requests only `google.com/tpu` is BestEffort, the first evicted under memory
pressure, and HF_HOME in `/dev/shm` puts the whole download in memory the node counts. So the
server requests what the weights and the runtime need, within the node's allocatable memory
(GKE docs "Plan GKE node sizes"). Figures and sources: docs/gke.md "What the pods need of a
node and a namespace".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components import catalog
from components.catalog import Chip
from components.config import ModelSettings, WorkloadSections

GIB = 1024**3
#: Host memory is given in GB: read as 10^9 bytes, the smaller reading, so requests fit.
GB = 10**9
#: GKE Standard's reservation: (up to GiB, share of that band).
MEMORY_RESERVED_BANDS: tuple[tuple[float, float], ...] = (
    (4, 0.25),
    (8, 0.20),
    (16, 0.10),
    (128, 0.06),
    (math.inf, 0.02),
)
CPU_RESERVED_BANDS: tuple[tuple[float, float], ...] = (
    (1, 0.06),
    (2, 0.01),
    (4, 0.005),
    (math.inf, 0.0025),
)
EVICTION_THRESHOLD_GIB = 100 / 1024
#: GKE's DaemonSets on a TPU node: a bound of our own, as no source gives their sum.
SYSTEM_PODS_CPU = 1.0
SYSTEM_PODS_MEMORY_GIB = 3.0
#: The server process beside the weights.
RUNTIME_MEMORY_GIB = 6.0
#: Hugging Face's lock, metadata and partial files beside the download.
SHM_HEADROOM = 0.10
CACHE_CONTAINER = {"requests": {"cpu": "250m", "memory": "512Mi"}}
READINESS_CONTAINER = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"memory": "64Mi"},
}


def _banded(total: float, bands: tuple[tuple[float, float], ...]) -> float:
    reserved, floor = 0.0, 0.0
    for ceiling, share in bands:
        if total <= floor:
            break
        reserved += (min(total, ceiling) - floor) * share
        floor = ceiling
    return reserved


def allocatable_memory_gib(memory_gib: float) -> float:
    """Less GKE Standard's reservations and eviction threshold."""
    return memory_gib - _banded(memory_gib, MEMORY_RESERVED_BANDS) - EVICTION_THRESHOLD_GIB


def allocatable_cpu(vcpus: float) -> float:
    return vcpus - _banded(vcpus, CPU_RESERVED_BANDS)


@dataclass(frozen=True)
class NodeBudget:
    """One TPU node's allocatable less the DaemonSets' allowance."""

    machine_type: str
    cpu: float
    memory_gib: float


def node_budget(chip: Chip) -> NodeBudget:
    gke = chip.gke
    assert gke is not None, "the gke backend runs only on single-host slices"
    shape = catalog.GKE_MACHINE_SHAPES[gke.machine_type]
    memory = shape.memory_gb * GB / GIB
    return NodeBudget(
        machine_type=gke.machine_type,
        cpu=allocatable_cpu(shape.vcpus) - SYSTEM_PODS_CPU,
        memory_gib=allocatable_memory_gib(memory) - SYSTEM_PODS_MEMORY_GIB,
    )


def download_gib(model: ModelSettings) -> float:
    """The checkpoint HF_HOME holds: the catalog's size, else the (bf16) weights."""
    entry = catalog.MODELS.get(model.id)
    return entry.checkpoint_gib if entry else model.weights_gib


def shm_gib(model: ModelSettings) -> int:
    return math.ceil(download_gib(model) * (1 + SHM_HEADROOM))


def server_memory_gib(model: ModelSettings) -> int:
    """`/dev/shm` full, the weights once more while they load onto the chips, the runtime."""
    return math.ceil(shm_gib(model) + download_gib(model) + RUNTIME_MEMORY_GIB)


def server_cpu(chip: Chip) -> int:
    """Half the node's budget: the host work is light; the rest is for sidecars and bursts."""
    return max(1, math.floor(node_budget(chip).cpu / 2))


def server_resources(chip: Chip, model: ModelSettings) -> dict[str, dict[str, str]]:
    chips = str(chip.chips)
    budget = math.floor(node_budget(chip).memory_gib)
    need = server_memory_gib(model)
    limits = {catalog.GKE_TPU_RESOURCE: chips, "memory": f"{budget}Gi"}
    if need > budget:
        # The whole budget, so the pod still fits a node; no limit, which loading could cross.
        need = budget
        del limits["memory"]
    return {
        "requests": {
            catalog.GKE_TPU_RESOURCE: chips,
            "cpu": str(server_cpu(chip)),
            "memory": f"{need}Gi",
        },
        "limits": limits,
    }


def shm_volume(config: WorkloadSections, name: str) -> dict[str, object]:
    """The VM path's `--shm-size`, sized for the download."""
    size = f"{shm_gib(config.model)}Gi"
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
