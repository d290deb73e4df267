"""Chips and models the program can reason about before anything is requested.

Every figure here decides money or a failed boot. Each one's source, and where it is a guess:
docs/configuration.md, "The catalog".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Provisioning = Literal["flex-start", "spot", "on-demand"]


@dataclass(frozen=True)
class ChipFamily:
    """One TPU generation: per-chip figures shared by all of its single-host slices."""

    name: str
    #: HBM per chip as the runtime reports it (size against this, not the marketing number).
    hbm_gib_per_chip: float
    accelerator_prefix: str
    runtime_version: str
    peak_bf16_tflops: float
    hbm_bandwidth_gbps: float
    #: Indicative US-region prices.
    usd_per_chip_hour: Mapping[Provisioning, float]


@dataclass(frozen=True)
class Chip:
    """A single-host slice: what `tpu.chip` names."""

    name: str  # our spelling, e.g. "v5e-1"
    family: ChipFamily
    chips: int

    @property
    def accelerator_type(self) -> str:
        """The spelling the TPU API and gcloud accept (`v5litepod-1`; `v5e-1` is never valid)."""
        return f"{self.family.accelerator_prefix}-{self.chips}"

    @property
    def gke(self) -> GkeTpu | None:
        return GKE_TPUS.get(self.name)

    @property
    def hbm_gib(self) -> float:
        return self.family.hbm_gib_per_chip * self.chips

    def hourly_usd(self, provisioning: Provisioning) -> float:
        return round(self.family.usd_per_chip_hour[provisioning] * self.chips, 4)


V5E = ChipFamily(
    name="v5e",
    hbm_gib_per_chip=15.75,
    accelerator_prefix="v5litepod",
    runtime_version="v2-alpha-tpuv5-lite",
    peak_bf16_tflops=197.0,
    hbm_bandwidth_gbps=858.99,  # 800 GiBps, in GB/s to compare with v6e
    usd_per_chip_hour=MappingProxyType(
        # flex-start is spot + 3.8% (derived); on-demand is in neither seed (unverified).
        {"spot": 0.58, "flex-start": 0.602, "on-demand": 1.20}
    ),
)

V6E = ChipFamily(
    name="v6e",
    hbm_gib_per_chip=31.25,
    accelerator_prefix="v6e",
    runtime_version="v2-alpha-tpuv6e",
    peak_bf16_tflops=918.0,  # in neither seed: unverified
    hbm_bandwidth_gbps=1630.0,
    usd_per_chip_hour=MappingProxyType(
        # spot is flex-start less v5e's 3.8%: a guess.
        {"flex-start": 1.35, "spot": 1.30, "on-demand": 2.70}
    ),
)

# Single-host slices only: one VM, so one `docker run` and tensor parallelism == chip count.
CHIPS: Mapping[str, Chip] = MappingProxyType(
    {
        name: Chip(name=name, family=family, chips=n)
        for family in (V5E, V6E)
        for n in (1, 4, 8)
        for name in (f"{family.name}-{n}",)
    }
)

# Zones where the TPU API was measured to reject flex-start for a chip, and the API's own words.
FLEX_START_REJECTED_ZONES: Mapping[str, frozenset[str]] = MappingProxyType(
    {"v5e-1": frozenset({"europe-west4-a", "europe-west4-b"})}
)
FLEX_START_REJECTION_TEXT = (
    'FLEX_START provisioning model is not supported for accelerator type "{accelerator}"'
)

FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600

#: A warm start, per chip family: the longest part of `renewal.lead`. v6e's is an estimate.
WARM_START_SECONDS: Mapping[str, int] = MappingProxyType({"v5e": 497, "v6e": 2 * 497})

#: Measured (cold, warm) server starts, from `docker run` to ready; nothing else was measured.
MEASURED_START_SECONDS: Mapping[tuple[str, str], tuple[int, int]] = MappingProxyType(
    {("v5litepod-1", "google/gemma-4-E2B-it"): (857, 497)}
)

# A larger slice spans hosts, which neither one `docker run` nor vLLM on TPU in GKE can serve.
MAX_CHIPS_PER_HOST: Mapping[str, int] = MappingProxyType({"v5e": 8, "v6e": 8})


@dataclass(frozen=True)
class GkeTpu:
    """A single-host slice as GKE spells it: the node pool's machine type and the node labels
    (`cloud.google.com/gke-tpu-accelerator`, `cloud.google.com/gke-tpu-topology`)."""

    machine_type: str
    accelerator: str
    topology: str


GKE_TPU_RESOURCE = "google.com/tpu"

GKE_TPUS: Mapping[str, GkeTpu] = MappingProxyType(
    {
        "v5e-1": GkeTpu("ct5lp-hightpu-1t", "tpu-v5-lite-podslice", "1x1"),
        "v5e-4": GkeTpu("ct5lp-hightpu-4t", "tpu-v5-lite-podslice", "2x2"),
        "v5e-8": GkeTpu("ct5lp-hightpu-8t", "tpu-v5-lite-podslice", "2x4"),
        "v6e-1": GkeTpu("ct6e-standard-1t", "tpu-v6e-slice", "1x1"),
        "v6e-4": GkeTpu("ct6e-standard-4t", "tpu-v6e-slice", "2x2"),
        "v6e-8": GkeTpu("ct6e-standard-8t", "tpu-v6e-slice", "2x4"),
    }
)


@dataclass(frozen=True)
class MachineShape:
    """What one TPU node counts against node auto-provisioning's `cpu` and `memory` limits."""

    vcpus: int
    memory_gb: int


# The v6e rows are not from a Google page: `gcloud compute machine-types describe` checks them.
GKE_MACHINE_SHAPES: Mapping[str, MachineShape] = MappingProxyType(
    {
        "ct5lp-hightpu-1t": MachineShape(24, 48),
        "ct5lp-hightpu-4t": MachineShape(112, 192),
        "ct5lp-hightpu-8t": MachineShape(224, 384),
        "ct6e-standard-1t": MachineShape(44, 176),
        "ct6e-standard-4t": MachineShape(180, 720),
        "ct6e-standard-8t": MachineShape(180, 1440),
    }
)

# The `resourceType` names a node auto-provisioning limit on these TPUs may carry, counted in
# chips; tools name v5e's two ways, so both are read.
GKE_NAP_TPU_RESOURCE_TYPES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "tpu-v5-lite-podslice": ("tpu-v5-lite-podslice", "tpu-v5e-slice"),
        "tpu-v6e-slice": ("tpu-v6e-slice",),
    }
)

# Zones where GKE offers flex-start for each TPU family: narrower than the TPU API's own zones.
GKE_FLEX_START_ZONES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "v5e": ("us-west4-a",),
        "v6e": ("asia-northeast1-b", "us-east5-a", "us-east5-b"),
    }
)

GKE_MIN_FLEX_START_VERSION = "1.33.0-gke.1712000"
# From this version a ComputeClass creates node pools without cluster-level auto-provisioning.
GKE_MIN_CLASS_AUTO_CREATION_VERSION = "1.33.3-gke.1136000"


@dataclass(frozen=True)
class Model:
    """What the program knows about a model before it is served."""

    id: str
    #: Weights resident in HBM, GiB: what must fit before any KV cache.
    weights_gib: float
    checkpoint_gib: float
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None


MODELS: Mapping[str, Model] = MappingProxyType(
    {
        "google/gemma-4-E2B-it": Model(
            id="google/gemma-4-E2B-it",
            weights_gib=8.97,
            checkpoint_gib=9.54,
            # Layer geometry unknown: not stated in our copy of the seed, so not guessed.
        ),
        "google/gemma-4-31B-it": Model(
            id="google/gemma-4-31B-it",
            weights_gib=58.25,
            checkpoint_gib=58.25,
            layers=60,
            kv_heads=8,
            head_dim=256,
        ),
    }
)

# KV-cache dtypes, as measured on v5e-1: those that run, those vLLM's CLI rejects, and those it
# accepts but that kill the server at boot (turboquant_* is a family).
KV_CACHE_DTYPES: frozenset[str] = frozenset({"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"})
KV_CACHE_DTYPES_REJECTED_BY_CLI: frozenset[str] = frozenset({"int8"})
KV_CACHE_DTYPES_KILLING_BOOT: frozenset[str] = frozenset(
    {"int8_per_token_head", "nvfp4", "fp8_inc", "fp8_ds_mla"}
)
KV_CACHE_DTYPE_KILLING_PREFIXES: tuple[str, ...] = ("turboquant_",)

# vLLM's --dtype choices; only bfloat16 runs Gemma 4 on TPU, the rest are left to the user.
MODEL_DTYPES: frozenset[str] = frozenset(
    {"auto", "bfloat16", "half", "float16", "float", "float32"}
)
