"""CPU and memory for the GKE pods, sized from the TPU node's machine shape and the model.

Why: a pod that requests only `google.com/tpu` is BestEffort, the first the kubelet evicts
under memory pressure (Kubernetes docs "Node-pressure Eviction": pods whose usage exceeds
their requests go first, then by priority, then by usage above requests), and HF_HOME in
`/dev/shm` puts the whole download in memory the node counts. So the server requests what the
weights (in `/dev/shm`, and once more in the process while they load) and the runtime need,
which makes it Burstable and, under pressure, last in line; `/dev/shm` is a memory emptyDir
with a `sizeLimit`, which bounds the tmpfs (Kubernetes API `EmptyDirVolumeSource.sizeLimit`:
"the minimum value between the SizeLimit specified here and the sum of memory limits of all
containers"). The memory limit is the node's whole budget, never below what the pod uses: it
keeps a runaway from pushing the node into pressure, which would evict the DaemonSets too (and
there is none when the request had to be capped at the budget).
No CPU limit: a limit throttles vLLM's engine loop for nothing on a node it has alone.

The node: catalog.GKE_MACHINE_SHAPES, less what GKE Standard reserves (GKE docs "Plan GKE
node sizes", memory and CPU reservations, and a 100 MiB eviction threshold), less
SYSTEM_PODS, the project's own allowance for GKE's DaemonSets on a TPU node (no source gives
their sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components import catalog
from components.catalog import Chip
from components.config import WorkloadSections
from components.config.model import ModelSettings

GIB = 1024**3
#: GCE and the Cloud TPU docs give TPU host memory in GB; read as 10^9 bytes, the smaller
#: reading, so that what the pod asks for fits either way.
GB = 10**9
#: GKE's memory reservation on Standard nodes: (up to GiB, share of that band).
MEMORY_RESERVED_BANDS: tuple[tuple[float, float], ...] = (
    (4, 0.25),
    (8, 0.20),
    (16, 0.10),
    (128, 0.06),
    (math.inf, 0.02),
)
#: GKE's CPU reservation: (up to cores, share of that band).
CPU_RESERVED_BANDS: tuple[tuple[float, float], ...] = (
    (1, 0.06),
    (2, 0.01),
    (4, 0.005),
    (math.inf, 0.0025),
)
EVICTION_THRESHOLD_GIB = 100 / 1024
#: GKE's DaemonSets on a TPU node (kube-proxy or the dataplane, logging and metrics agents, the
#: TPU device plugin, the Secret Manager CSI driver, managed collection): a bound of our own.
SYSTEM_PODS_CPU = 1.0
SYSTEM_PODS_MEMORY_GIB = 3.0
#: The server process beside the weights: Python, JAX and libtpu, the tokenizer, the API server.
RUNTIME_MEMORY_GIB = 6.0
#: Room in `/dev/shm` beyond the download: Hugging Face's lock and metadata files, and a
#: revision's partial files while it downloads.
SHM_HEADROOM = 0.10
#: The compile-cache init container and sidecar: a Python process moving cache files.
CACHE_CONTAINER = {"requests": {"cpu": "250m", "memory": "512Mi"}}
#: The readiness Job: busybox sh and curl; a memory limit at its request (curl and sh need no
#: more), no CPU limit.
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
    """What a GKE Standard node of `memory_gib` offers pods (reservations and the eviction
    threshold taken off)."""
    return memory_gib - _banded(memory_gib, MEMORY_RESERVED_BANDS) - EVICTION_THRESHOLD_GIB


def allocatable_cpu(vcpus: float) -> float:
    return vcpus - _banded(vcpus, CPU_RESERVED_BANDS)


@dataclass(frozen=True)
class NodeBudget:
    """What the server may ask of one TPU node: allocatable less the DaemonSets' allowance."""

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
    """The checkpoint HF_HOME holds: the catalog's size, else the weights (a bf16 checkpoint
    is its weights)."""
    entry = catalog.MODELS.get(model.id)
    return entry.checkpoint_gib if entry else model.weights_gib


def shm_gib(model: ModelSettings) -> int:
    """`/dev/shm`'s sizeLimit: the download, with headroom, in whole GiB."""
    return math.ceil(download_gib(model) * (1 + SHM_HEADROOM))


def server_memory_gib(model: ModelSettings) -> int:
    """The server's memory request: `/dev/shm` full, the weights once more in the process while
    they load onto the chips, and the runtime."""
    return math.ceil(shm_gib(model) + download_gib(model) + RUNTIME_MEMORY_GIB)


def server_cpu(chip: Chip) -> int:
    """Half the node's budget: the server's host work is light (tokenizing, scheduling, HTTP);
    the rest stays for the cache sidecar, the readiness Job and bursts."""
    return max(1, math.floor(node_budget(chip).cpu / 2))


def server_resources(chip: Chip, model: ModelSettings) -> dict[str, dict[str, str]]:
    """The server container's requests and limits: the TPU chips, CPU and memory."""
    chips = str(chip.chips)
    budget = math.floor(node_budget(chip).memory_gib)
    need = server_memory_gib(model)
    limits = {catalog.GKE_TPU_RESOURCE: chips, "memory": f"{budget}Gi"}
    if need > budget:
        # A model near the HBM limit on the smallest host: the request takes the whole budget,
        # so the pod still fits a node, and there is no memory limit, which the sizing says it
        # could cross while the weights load (an OOM kill, not a safe bound).
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
    """`/dev/shm` in memory, bounded: seed 000's `--shm-size`, sized for the download."""
    size = f"{shm_gib(config.model)}Gi"
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
