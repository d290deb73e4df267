"""Chips and models the program can reason about before anything is requested.

Every figure here decides money or a failed boot: HBM decides whether a model fits, the gcloud
spelling and runtime decide whether the API accepts the request, and the price decides the cost
outputs. Each number names its source. "seed 000" is `shared/seeds/000_b725c05a82784bed.txt`
(the v5e-1 build log), "seed 003" is `shared/seeds/003_34d7b74390953b68.txt` (the 31B on v6e-4
deployment). Where a seed guesses, the two disagree, or a figure is not in either, the comment
says so.
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
    #: gcloud / API accelerator type prefix: `v5litepod-N`, `v6e-N`.
    accelerator_prefix: str
    runtime_version: str
    peak_bf16_tflops: float
    hbm_bandwidth_gbps: float
    #: Indicative US-region prices, $ per chip-hour.
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
        """How GKE names this slice, if a single GKE node can carry it."""
        return GKE_TPUS.get(self.name)

    @property
    def hbm_gib(self) -> float:
        return self.family.hbm_gib_per_chip * self.chips

    def hourly_usd(self, provisioning: Provisioning) -> float:
        return round(self.family.usd_per_chip_hour[provisioning] * self.chips, 4)


V5E = ChipFamily(
    name="v5e",
    # seed 000 Part 2 "The chip" table: 16 GB nominal, 15.75 GiB visible to the runtime
    # (measured; also total_hbm_limit_gb=15.75GiB in the §1.4 Memory statistics line).
    hbm_gib_per_chip=15.75,
    # seed 000 §1.2 and Part 2 table: gcloud spells v5e "v5litepod-N" (measured).
    accelerator_prefix="v5litepod",
    # seed 000 §1.2 and Part 2 table: runtime v2-alpha-tpuv5-lite (measured).
    runtime_version="v2-alpha-tpuv5-lite",
    # seed 000 Part 2 table: 197 TFLOPS peak bf16 (vendor figure).
    peak_bf16_tflops=197.0,
    # seed 000 Part 2 table: 800 GiBps (vendor; Google quotes v5e in GiBps, seed 000 warns) =
    # 858.99 GB/s, normalised to GB/s so it compares with v6e.
    hbm_bandwidth_gbps=858.99,
    usd_per_chip_hour=MappingProxyType(
        {
            # seed 000 intro: "about $0.58/hour on spot" (an approximate figure).
            "spot": 0.58,
            # seed 000 §1.2: flex-start is "only 3.8% more than spot" -> 0.58 * 1.038 = 0.602.
            # Derived, not quoted: the seed's cost section is not in the copy we have.
            "flex-start": 0.602,
            # Not in either seed: Google Cloud's published v5e on-demand list price
            # ($1.20/chip-hour, us-west4). Unverified here; override with cost.hourlyUsd.
            "on-demand": 1.20,
        }
    ),
)

V6E = ChipFamily(
    name="v6e",
    # seed 003 "HBM layout" section: 32 GB physical per chip, "reported as 31.25 GiB usable".
    hbm_gib_per_chip=31.25,
    # seed 003 "TPU VM Infrastructure Details": accelerator type v6e-4 (measured).
    accelerator_prefix="v6e",
    # seed 003 "TPU VM Infrastructure Details": runtime v2-alpha-tpuv6e (measured).
    runtime_version="v2-alpha-tpuv6e",
    # Not in either seed: Google's published v6e peak bf16 (918 TFLOPS). Unverified here.
    peak_bf16_tflops=918.0,
    # seed 003 "are you sure?" section: 1.63 TB/s = 1,630 GB/s (vendor, quoted by an LLM in
    # the seed; consistent with seed 000's "~1.9x" v5e -> v6e ratio: 1630 / 859 = 1.9).
    hbm_bandwidth_gbps=1630.0,
    usd_per_chip_hour=MappingProxyType(
        {
            # seed 003 "cost comparison": $1.35/hr per chip, in a column headed
            # "Flex-start Rate (Preem...". That seed conflates flex-start with preemptible.
            "flex-start": 1.35,
            # Not given separately in either seed. Derived with seed 000's "flex-start is 3.8%
            # above spot" (measured on v5e): 1.35 / 1.038 = 1.30. A guess.
            "spot": 1.30,
            # seed 003 "cost comparison": $2.70/hr on-demand per chip.
            "on-demand": 2.70,
        }
    ),
)

# Single-host slices only: one VM, so one `docker run` and tensor parallelism == chip count.
# v5e single hosts carry 1, 4 or 8 chips and v6e single hosts 1, 4 or 8 (seed 003 mentions v6e-8
# as "8 chips/256GB", the next single-host size up).
CHIPS: Mapping[str, Chip] = MappingProxyType(
    {
        name: Chip(name=name, family=family, chips=n)
        for family in (V5E, V6E)
        for n in (1, 4, 8)
        for name in (f"{family.name}-{n}",)
    }
)

# Zones where the TPU API was measured to reject flex-start for a chip, and the API's own words.
# seed 000 §1.1: "europe-west4-a and -b reject it at the API with FLEX_START provisioning model is
# not supported for accelerator type "v5litepod-1", regardless of quota." Only v5e-1 was measured.
FLEX_START_REJECTED_ZONES: Mapping[str, frozenset[str]] = MappingProxyType(
    {"v5e-1": frozenset({"europe-west4-a", "europe-west4-b"})}
)
FLEX_START_REJECTION_TEXT = (
    'FLEX_START provisioning model is not supported for accelerator type "{accelerator}"'
)

# seed 000 §1.2 / DESIGN.md: flex-start runs at most 7 days.
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600

# A warm start (compile cache restored) of the stack's model, per chip family: the longest part
# of starting the next node before the current one ends (`renewal.lead`,
# components/config/renewal.py).
# v5e: seed 000 §1.3, measured: gemma-4-E2B-it on v5e-1 restarts in 497 s with ~/.cache/vllm
# mounted (857 s cold, 685 s of it XLA compilation).
# v6e: seed 003 (gemma-4-31B-it on v6e-4) gives no load or compile times at all, so this is an
# estimate: twice v5e's, the same factor the v6e4 stack gives its readiness budget (60m vs 30m)
# for 6x the weights (58.25 vs 9.54 GiB to download and place in HBM) and a larger graph to load
# from the cache. Replace it with a measurement (`startup_seconds` after a warm renewal).
WARM_START_SECONDS: Mapping[str, int] = MappingProxyType({"v5e": 497, "v6e": 2 * 497})

#: Measured server start-ups, (cold, warm with the compile cache), from `docker run` to ready,
#: by (accelerator type as the TPU API spells it, model): seed 000 §1.4 "Cold start is 857 s"
#: and §1.3 "cuts a restart to 497 s". Nothing else has been measured.
MEASURED_START_SECONDS: Mapping[tuple[str, str], tuple[int, int]] = MappingProxyType(
    {("v5litepod-1", "google/gemma-4-E2B-it"): (857, 497)}
)

# Chips per host of each family: a slice with more chips than this spans several hosts, which
# neither the TPU-VM path (one `docker run`) nor vLLM on TPU in GKE (single-host only) can serve.
# GKE docs "Plan TPUs in GKE": v5e and v6e single-host slices stop at 8 chips (2x4 topology).
MAX_CHIPS_PER_HOST: Mapping[str, int] = MappingProxyType({"v5e": 8, "v6e": 8})


@dataclass(frozen=True)
class GkeTpu:
    """A single-host slice as GKE spells it: the node pool's machine type and the node labels.

    GKE docs "Plan TPUs in GKE" (single-host slice table): v5e nodes carry
    `cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice`, v6e `tpu-v6e-slice`, and
    `cloud.google.com/gke-tpu-topology` `1x1` / `2x2` / `2x4` for 1, 4 and 8 chips
    (GoogleCloudPlatform/cluster-toolkit `examples/gke-tpu-v6e` selects nodes by them). The
    node offers `google.com/tpu` = the chip count, and is tainted `google.com/tpu`.
    The stack's ComputeClass names the slice by `type` (the accelerator) and `topology`, and the
    pods select the class alone, as GoogleCloudPlatform/accelerated-platforms
    `online-inference-tpu/vllm` does (`cloud.google.com/compute-class: tpu-v6e-2x2`, whose
    priorities include `flexStart` with `nodeRecycling`: `platforms/gke/base/core/
    custom_compute_class/templates/manifests/tpu/v6e/custom-compute-tpu-v6e-2x2.yaml`).
    """

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
    """What one TPU node counts against node auto-provisioning's cluster-wide `cpu` (vCPUs)
    and `memory` (GB) limits (GKE docs "About node auto-provisioning", Resource limits)."""

    vcpus: int
    memory_gb: int


# v5e: Cloud TPU docs "TPU v5e", VM types table (machine type (GKE API), vCPUs per VM, RAM (GB)
# per VM): 24/48, 112/192, 224/384. v6e: 44/176, 180/720, 180/1440, as a public machine-type
# table gives them (its v5e rows match Google's); Google's "TPU v6e" page gives 1536 GiB of DRAM
# per 8-chip host, which fits, but lists no per-VM figures, so these were not read off a Google
# page (`gcloud compute machine-types describe ct6e-standard-4t --zone us-east5-a` shows them).
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
# chips. v6e: `tpu-v6e-slice` in AI-Hypercomputer/xpk (`src/xpk/core/nap.py`, the node label),
# GoogleCloudPlatform/accelerated-platforms (`platforms/gke/base/_shared_config/
# cluster_variables.tf`) and cluster-toolkit (`pkg/config/machine_mappings.json`). v5e: xpk and
# accelerated-platforms use the node label `tpu-v5-lite-podslice`, cluster-toolkit
# `tpu-v5e-slice`; both are read. cluster-toolkit (`pkg/config/autoscaling.go`) counts the
# limit in accelerators, a multiple of the chips per VM.
GKE_NAP_TPU_RESOURCE_TYPES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "tpu-v5-lite-podslice": ("tpu-v5-lite-podslice", "tpu-v5e-slice"),
        "tpu-v6e-slice": ("tpu-v6e-slice",),
    }
)

# Zones where GKE offers flex-start for each TPU family. GKE docs "About GPU and TPU provisioning
# with flex-start" (the TPU availability table): narrower than the TPU API's own zones.
GKE_FLEX_START_ZONES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "v5e": ("us-west4-a",),
        "v6e": ("asia-northeast1-b", "us-east5-a", "us-east5-b"),
    }
)

# GKE docs (flex-start for TPUs): node pools with flex-start TPUs need this version or later.
GKE_MIN_FLEX_START_VERSION = "1.33.0-gke.1712000"
# GKE docs "About custom ComputeClasses" (Node pool auto-creation and ComputeClasses): from this
# version a ComputeClass with `nodePoolAutoCreation.enabled` creates its node pools without
# cluster-level node auto-provisioning; before it, the cluster must have that enabled.
GKE_MIN_CLASS_AUTO_CREATION_VERSION = "1.33.3-gke.1136000"


@dataclass(frozen=True)
class Model:
    """What the program knows about a model before it is served."""

    id: str
    #: Weights resident in HBM, GiB: what must fit before any KV cache.
    weights_gib: float
    #: Checkpoint size on disk / download, GiB.
    checkpoint_gib: float
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None


MODELS: Mapping[str, Model] = MappingProxyType(
    {
        "google/gemma-4-E2B-it": Model(
            id="google/gemma-4-E2B-it",
            # seed 000 Part 2 "Quantization": "Weights are 8.97 of the 14.49 GiB budget (62%)";
            # the same 8.97 GiB is total_hbm_used_gb in the §1.4 Memory statistics line.
            weights_gib=8.97,
            # seed 000 §1.4: "the 9.54 GiB checkpoint downloads in about 10 seconds".
            checkpoint_gib=9.54,
            # Layer geometry: seed 000 derives its 3.15 GiB/step from it but the copy we have
            # does not state it, so it is left unknown rather than guessed.
        ),
        "google/gemma-4-31B-it": Model(
            id="google/gemma-4-31B-it",
            # seed 003 "Model Weight Distribution": 58.25 GiB in bfloat16, ~14.56 GiB per chip
            # at TP=4. The seed calls it "Total Checkpoint Size" and uses it as the HBM figure.
            weights_gib=58.25,
            # seed 003: the same 58.25 GiB (bf16 checkpoint); no separate download size given.
            checkpoint_gib=58.25,
            # seed 003 "KV Cache Formula": 60 layers, 8 KV heads (GQA), head dim 256.
            layers=60,
            kv_heads=8,
            head_dim=256,
        ),
    }
)

# KV-cache dtypes. seed 000 Part 2 "Quantization" table: auto (bf16) is the only one worth running;
# fp8_e4m3 / fp8_e5m2 are reachable (no capacity gain on v5e, ~2% slower); seed 003 runs
# fp8_e5m2 on v6e-4.
KV_CACHE_DTYPES: frozenset[str] = frozenset({"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"})
# seed 000 Part 2: "int8 | rejected by the CLI enum - never reaches the engine".
KV_CACHE_DTYPES_REJECTED_BY_CLI: frozenset[str] = frozenset({"int8"})
# seed 000 Part 2: "accepted by the CLI, then kill the server at boot". turboquant_* is a family.
KV_CACHE_DTYPES_KILLING_BOOT: frozenset[str] = frozenset(
    {"int8_per_token_head", "nvfp4", "fp8_inc", "fp8_ds_mla"}
)
KV_CACHE_DTYPE_KILLING_PREFIXES: tuple[str, ...] = ("turboquant_",)

# vLLM's --dtype choices. seed 000 Part 2: bf16 is the only compute format that runs for Gemma 4
# on this stack; the others are vLLM's valid spellings and are left to the user.
MODEL_DTYPES: frozenset[str] = frozenset(
    {"auto", "bfloat16", "half", "float16", "float", "float32"}
)
