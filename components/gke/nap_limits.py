"""Node auto-provisioning's resource limits, which bind the TPU pools of the stack's ComputeClass.

Nodes that do not fit them leave the pods Pending with nothing said but the readiness Job's
timeout, so an existing cluster's limits are checked before anything is created. What is
counted and the sources: docs/gke.md "Prerequisites".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components import catalog
from components.config import StackConfig
from components.gke.k8s_manifests import MAX_SURGE

KEY = "tpu-vllm:gke.cluster"
REPLICAS_KEY = "tpu-vllm:gke.replicas"


@dataclass(frozen=True)
class Demand:
    """What the TPU nodes need of one limited resource, and the cluster's maximum."""

    resource_type: str
    amount: int
    maximum: float
    unit: str


def tpu_nodes_needed(config: StackConfig) -> int:
    """The replicas', a rollout's spare, and with flex-start a recycled node's replacement."""
    recycling = config.tpu.provisioning == "flex-start"
    return config.gke.replicas + MAX_SURGE + (1 if recycling else 0)


def _limits(found: Any) -> dict[str, float] | None:
    """`resource_type -> maximum` of an enabled node auto-provisioning; None when it is off."""
    scalings = [s for s in getattr(found, "cluster_autoscalings", None) or [] if s is not None]
    enabled = [s for s in scalings if getattr(s, "enabled", False)]
    if not enabled:
        return None
    limits: dict[str, float] = {}
    for scaling in enabled:
        for limit in getattr(scaling, "resource_limits", None) or []:
            kind, maximum = getattr(limit, "resource_type", None), getattr(limit, "maximum", None)
            if kind and maximum is not None:
                limits[str(kind)] = float(maximum)
    return limits


def demands(config: StackConfig, limits: Mapping[str, float]) -> list[Demand]:
    """Each limited resource the TPU nodes use, with what they need of it."""
    gke = config.tpu.chip.gke
    assert gke is not None
    shape = catalog.GKE_MACHINE_SHAPES[gke.machine_type]
    nodes = tpu_nodes_needed(config)
    wanted = [("cpu", nodes * shape.vcpus, "vCPUs"), ("memory", nodes * shape.memory_gb, "GB")]
    wanted += [
        (name, nodes * config.tpu.chip.chips, "TPU chips")
        for name in catalog.GKE_NAP_TPU_RESOURCE_TYPES.get(gke.accelerator, ())
    ]
    return [Demand(k, amount, limits[k], unit) for k, amount, unit in wanted if k in limits]


def limit_problems(config: StackConfig, found: Any, where: str) -> list[str]:
    """Why the limits cannot hold the TPU nodes; empty when they can or are not reported."""
    limits = _limits(found)
    if not limits:
        return []
    every = {d.resource_type: d for d in demands(config, limits)}
    over = [d for d in every.values() if d.amount > d.maximum]
    if not over:
        return []
    gke = config.tpu.chip.gke
    assert gke is not None
    nodes = tpu_nodes_needed(config)
    surge = f" + {MAX_SURGE} that an update starts beside them"
    recycle = " + 1 that node recycling starts beside a node before its flex-start run ends"
    extra = recycle if nodes > config.gke.replicas + MAX_SURGE else ""
    why = f"{config.gke.replicas} for {REPLICAS_KEY}{surge}{extra}"
    short = ", ".join(
        f"`{d.resource_type}` maximum {d.maximum:g} < {d.amount} {d.unit}" for d in over
    )
    # gcloud takes both CPU and memory bounds with --enable-autoprovisioning.
    flags = " ".join(
        f"--max-{kind} {max(every[kind].amount, int(every[kind].maximum))}"
        for kind in ("cpu", "memory")
        if kind in every
    )
    tpu = [d for d in over if d.resource_type not in ("cpu", "memory")]
    fix_tpu = (
        f", and the `{tpu[0].resource_type}` limit to at least {tpu[0].amount} (a resourceLimits "
        "entry in `--autoprovisioning-config-file`)"
        if tpu
        else ""
    )
    name, location = config.gke.existing_cluster, config.gke.location
    command = f"`gcloud container clusters update {name} --location {location} " + (
        f"--enable-autoprovisioning {flags}`" if flags else "--autoprovisioning-config-file FILE`"
    )
    return [
        f"{KEY} = {where!r} has node auto-provisioning on, and its resource limits also bind the "
        "node pools GKE creates for the stack's ComputeClass (GKE docs \"Configure node pool "
        f'auto-creation", Limitations): {nodes} {gke.machine_type} nodes ({why}) exceed them: '
        f"{short}. The cluster's other nodes count against the same limits. Fix: raise the "
        f"limits to what the TPU nodes need plus what the other nodes use, e.g. {command} with "
        f"the other nodes' share added{fix_tpu}; or lower {REPLICAS_KEY}"
    ]


def missing_tpu_limit(config: StackConfig, found: Any, where: str) -> str | None:
    """A warning, not a refusal, when the limits name no TPU type: GKE does not document
    whether that allows TPU nodes or reads as 0."""
    limits = _limits(found)
    gke = config.tpu.chip.gke
    if not limits or gke is None:
        return None
    names = catalog.GKE_NAP_TPU_RESOURCE_TYPES.get(gke.accelerator, ())
    if not names or any(name in limits for name in names):
        return None
    chips = tpu_nodes_needed(config) * config.tpu.chip.chips
    name, location = config.gke.existing_cluster, config.gke.location
    others = "".join(f" or `{other}`" for other in names[1:])
    return (
        f"{KEY} = {where!r} has node auto-provisioning on, and its resource limits name no "
        f"`{names[0]}`{others} (the TPU's resource type). GKE does not document whether it "
        "then allows TPU nodes or reads the missing limit as 0; if the TPU pods stay Pending, "
        "add a resourceLimits entry "
        f"`{{resourceType: {names[0]}, maximum: {chips}}}` with `gcloud container clusters "
        f"update {name} --location {location} --autoprovisioning-config-file FILE` "
        '(docs/gke.md, "Prerequisites")'
    )
