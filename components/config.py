"""The stack's configuration: the one place that knows the config keys.

A TPU hour is paid for whether the server boots or not, so every mistake this module can see is
raised here, before a single resource is registered: one error that names each bad key, the
value it had and the fix. Components receive the resulting immutable `StackConfig` and never
read Pulumi config themselves.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import pulumi

from components import catalog, renewal
from components.catalog import Chip, Provisioning
from components.messages import closest, sentence, show
from components.ssh import PER_DIAL_TIMEOUT_SECONDS, dial_budget_seconds

NAMESPACE = "tpu-vllm"

# Every key of every section, with its meaning; unknown keys are rejected with a suggestion so a
# typo (`maxModelLength`) cannot silently fall back to a default.
KEYS: Mapping[str, Mapping[str, str]] = {
    "tpu": {
        "chip": "TPU slice: v5e-1, v5e-4, v5e-8, v6e-1, v6e-4, v6e-8 (or gcloud's v5litepod-N)",
        "zones": "candidate zones, tried in order",
        "provisioning": "flex-start | spot | on-demand",
        "maxRunDuration": "flex-start run limit, e.g. 4h, 90m, 2d (at most 7d)",
        "runtimeVersion": "TPU VM runtime; default from the catalog",
        "capacityWait": "how long one zone may queue for capacity before the next is tried",
    },
    "model": {
        "id": "Hugging Face model id",
        "weightsGiB": "weights resident in HBM; required for models not in the catalog",
    },
    "vllm": {
        "image": "serving image",
        "port": "serving port",
        "dtype": "--dtype",
        "kvCacheDtype": "--kv-cache-dtype",
        "maxModelLen": "--max-model-len",
        "maxNumBatchedTokens": "--max-num-batched-tokens",
        "tensorParallelSize": "--tensor-parallel-size; must equal the chip count",
        "gpuMemoryUtilization": "--gpu-memory-utilization, in (0, 1]",
        "enablePrefixCaching": "--enable-prefix-caching",
        "toolCallParser": "--tool-call-parser (implies --enable-auto-tool-choice)",
        "reasoningParser": "--reasoning-parser",
        "limitMmPerPrompt": "--limit-mm-per-prompt, an object such as {image: 4, audio: 1}",
        "extraArgs": "other vllm serve flags, verbatim",
        "readinessTimeout": "how long to wait for 'Application startup complete.'",
    },
    "access": {
        "allowedCidrs": "who may reach the serving port",
        "allowPublic": "must be true to allow 0.0.0.0/0",
        "sshCidrs": "who may reach port 22; default allowedCidrs",
        "hfTokenSecret": "Secret Manager secret holding the Hugging Face token",
        "allowUnverifiedHostKey": "connect without verifying the node's SSH host key",
        "network": "VPC network of the node and its firewall rules; default `default`",
    },
    "cost": {
        "hourlyUsd": "override of the catalog's hourly price for the whole slice",
    },
    "dns": {
        "managedZone": "an existing Cloud DNS managed zone in the project, for a stable name",
        "name": "the record's name inside that zone; default the stack name",
    },
    "gke": {
        "replicas": "how many TPU replicas serve behind the one address (backend gke), >= 1",
        "cluster": "an existing GKE cluster (NAME or projects/P/locations/L/clusters/NAME); "
        "unset: the stack creates one",
    },
    "renewal": {
        "lead": "how long before a flex-start run ends its successor is requested, e.g. 1h (on GKE "
        "the ComputeClass's nodeRecycling.leadTimeSeconds); shorter than tpu.maxRunDuration; "
        "default: a capacity wait plus a warm start",
        "drain": "how long a replaced node keeps serving after the DNS record moved to its "
        "successor; at least the record's TTL (60 s) with dns.* (VM backend)",
    },
    "cache": {
        "enabled": "carry the XLA compile cache across TPU lifetimes in Cloud Storage",
        "bucket": "an existing bucket for the cache instead of the per-stack one",
        "restoreTimeout": "how long a node may spend restoring the cache before starting cold",
        "minCompileSeconds": "JAX caches only compiles that took at least this long; "
        "default 0: every compile",
    },
}

Backend = Literal["vm", "gke"]
#: `tpu-vllm:backend`: where the server runs. `vm` is one TPU VM from a queued resource;
#: `gke` is N flex-start TPU nodes in a GKE cluster behind one load-balancer address.
BACKENDS: tuple[Backend, ...] = ("vm", "gke")
DEFAULT_BACKEND: Backend = "vm"
# Words people use for a backend, mapped to ours for the "did you mean" hint.
BACKEND_ALIASES: Mapping[str, Backend] = {
    "kubernetes": "gke",
    "k8s": "gke",
    "gcp-gke": "gke",
    "tpu-vm": "vm",
    "tpuvm": "vm",
    "tpu": "vm",
    "queued-resource": "vm",
}
#: Two, so that a node being recycled (or a replica starting) never takes the endpoint down: the
#: PodDisruptionBudget keeps one serving while the other moves (README "Scale out on GKE").
DEFAULT_GKE_REPLICAS = 2

# vLLM's default port: the flag is rendered only when the stack asks for another one.
VLLM_DEFAULT_PORT = 8000
DEFAULT_IMAGE = "vllm/vllm-tpu:nightly"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # seed 000 §1.3 and seed 003 (92% HBM use).
DEFAULT_CAPACITY_WAIT = "30m"  # per zone; the queued request expires after it.
DEFAULT_READINESS_TIMEOUT = "30m"  # seed 000 §1.4: cold start is 857 s; 30 min is ~2x that.
# `renewal.lead` by default on GKE (the ComputeClass's nodeRecycling.leadTimeSeconds): a capacity
# wait (30 min, tpu.capacityWait's default) plus a warm start (497 s on v5e-1, seed 000 §1.3; the
# 31B start on v6e-4 is longer), rounded up to the hour GoogleCloudPlatform/accelerated-platforms'
# v6e ComputeClass uses (platforms/gke/base/core/custom_compute_class/templates/manifests/tpu/v6e/
# custom-compute-tpu-v6e-2x2.yaml, leadTimeSeconds: 3600). No renew schedule or DNS drain is in
# it: GKE itself seeks the node and the Service's address never moves. At most half of a
# shorter run. The VM backend's default is computed per chip (`_default_lead`).
DEFAULT_GKE_RENEWAL_LEAD = "1h"
DEFAULT_CACHE_RESTORE_TIMEOUT = "5m"  # a few GiB from a same-region bucket takes well under it.
# `renewal.lead` by default: the next node must serve before the current one ends, so the window
# holds everything between "less than lead left" and "the next node serves and the old one has
# drained": the time until a scheduled check notices (renewal.detection_seconds(): one period of
# the renew schedule, 15 min, plus one more for a run GitHub drops at high load, so 30 min), one
# zone's capacity wait (`tpu.capacityWait`, 30 min by default), PROVISIONING to ACTIVE plus first
# boot, host key and secret fetch (RENEWAL_PROVISIONING_SECONDS: not measured in either seed, so
# an estimate of 5 min), a warm start of the chip's model (catalog.WARM_START_SECONDS: v5e-1
# 497 s, seed 000; v6e ~17 min, estimated, seed 003 has no times) and the drain (3 min), rounded
# up to 5 minutes: 1 h 20 min for v5e1, 1 h 25 min for v6e4, about a third of a 4 h run.
RENEWAL_PROVISIONING_SECONDS = 300
RENEWAL_ROUND_SECONDS = 300
DEFAULT_HF_TOKEN_SECRET = "hf-token"  # noqa: S105 - a secret name, not a secret.
#: The auto-mode network most projects have; some have none, hence `access.network`.
DEFAULT_NETWORK = "default"
# seed 000 §1.1 `gcloud secrets create hf-token`.
PROVISIONING_MODELS: tuple[Provisioning, ...] = ("flex-start", "spot", "on-demand")

# Modalities are written in this order so the rendered flag is stable whatever order the
# config engine hands the object over in (Pulumi serialises objects with sorted keys).
MM_MODALITY_ORDER = ("image", "audio", "video")

# Flags that have a key of their own, so `extraArgs` may not repeat them.
FLAG_KEYS: Mapping[str, str] = {
    "--dtype": "vllm.dtype",
    "--kv-cache-dtype": "vllm.kvCacheDtype",
    "--max-model-len": "vllm.maxModelLen",
    "--max-num-batched-tokens": "vllm.maxNumBatchedTokens",
    "--tensor-parallel-size": "vllm.tensorParallelSize",
    "-tp": "vllm.tensorParallelSize",
    "--gpu-memory-utilization": "vllm.gpuMemoryUtilization",
    "--enable-prefix-caching": "vllm.enablePrefixCaching",
    "--tool-call-parser": "vllm.toolCallParser",
    "--enable-auto-tool-choice": "vllm.toolCallParser",
    "--reasoning-parser": "vllm.reasoningParser",
    "--limit-mm-per-prompt": "vllm.limitMmPerPrompt",
    "--port": "vllm.port",
}
# Flags `extraArgs` may carry whose value vLLM declares `ge=1` (vllm/config/scheduler.py,
# SchedulerConfig: `Field(..., ge=1)`): 0 or below passes the program, then vLLM refuses to boot
# while the TPU bills. The keyed ones (maxModelLen, maxNumBatchedTokens, tensorParallelSize)
# are checked where they are read.
POSITIVE_INT_FLAGS: tuple[str, ...] = (
    "--max-num-seqs",
    "--max-num-partial-prefills",
    "--max-long-partial-prefills",
    "--stream-interval",
)
# Flags that would put a secret on the command line, where `ps` and `docker inspect` show it.
FORBIDDEN_FLAGS: Mapping[str, str] = {
    "--api-key": "the API key is generated per stack and handed to vLLM from a file",
    "--hf-token": "the HF token is read by the container from a mounted file",
}

_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_SECRET_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_CLUSTER_NAME_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
_CLUSTER_PATH_RE = re.compile(
    r"^projects/(?P<project>[a-z][-a-z0-9.:]{4,61}[a-z0-9])/locations/(?P<location>[a-z]+-[a-z]+[0-9]+(?:-[a-z])?)"
    r"/clusters/(?P<name>[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)$"
)
_CHIP_SHAPE_RE = re.compile(r"^(?P<family>v[0-9]+[a-z]*)-(?P<chips>[0-9]+)$")
# Cloud Storage bucket names: 3-63 of [a-z0-9_.-], starting and ending with a letter or digit.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")
# A network of the stack's project, named as Compute Engine names resources (RFC 1035). The
# firewall rules are created in the same project, so another project's network is not accepted.
_NETWORK_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# Cloud DNS: a managed zone's name is 1-63 of [a-z0-9-], starting with a letter and not ending
# with a dash; a record name is dot-separated labels of 1-63 of [a-z0-9-] (RFC 1123 host names).
_MANAGED_ZONE_RE = _NETWORK_RE  # Compute Engine's naming rule again
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DOC_NETS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)


class ConfigError(pulumi.RunError):
    """Bad stack configuration. A RunError, so Pulumi prints the message without a traceback."""

    def __init__(self, problems: Sequence[str]) -> None:
        # Each problem is a sentence ending with a period (components/messages.py).
        self.problems = [sentence(p) for p in problems]
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"tpu-vllm: the stack configuration has {len(self.problems)} problem(s); "
            f"nothing was created:\n{lines}"
        )


@dataclass(frozen=True)
class TpuSettings:
    chip: Chip
    #: Zones to try, in order, after dropping the ones measured to reject this request.
    zones: tuple[str, ...]
    provisioning: Provisioning
    max_run_seconds: int | None
    runtime_version: str
    #: How long one zone may queue for capacity (the request's validUntilDuration).
    capacity_wait_seconds: int


@dataclass(frozen=True)
class ModelSettings:
    id: str
    weights_gib: float


@dataclass(frozen=True)
class VllmSettings:
    image: str
    port: int
    dtype: str
    kv_cache_dtype: str
    max_model_len: int | None
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    tool_call_parser: str | None
    reasoning_parser: str | None
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None
    extra_args: tuple[str, ...]
    readiness_timeout_seconds: int

    def serve_args(self) -> list[str]:
        """The `vllm serve MODEL` flags, in seed 000 §1.3's order, one value per element."""
        args = ["--dtype", self.dtype, "--kv-cache-dtype", self.kv_cache_dtype]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        args += ["--gpu-memory-utilization", _format_number(self.gpu_memory_utilization)]
        if self.enable_prefix_caching:
            args.append("--enable-prefix-caching")
        args += list(self.extra_args)
        if self.limit_mm_per_prompt is not None:
            limits = json.dumps(dict(self.limit_mm_per_prompt), separators=(",", ":"))
            args += ["--limit-mm-per-prompt", limits]
        if self.tool_call_parser:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.reasoning_parser:
            args += ["--reasoning-parser", self.reasoning_parser]
        if self.port != VLLM_DEFAULT_PORT:
            args += ["--port", str(self.port)]
        return args


@dataclass(frozen=True)
class AccessSettings:
    allowed_cidrs: tuple[str, ...]
    allow_public: bool
    ssh_cidrs: tuple[str, ...]
    hf_token_secret: str
    allow_unverified_host_key: bool
    #: The VPC network: the node's `networkConfig.network` and the firewall rules' network.
    network: str = DEFAULT_NETWORK


@dataclass(frozen=True)
class DnsSettings:
    """A stable name for the endpoint: an A record `name.ZONE_DNS_NAME` in `managed_zone`."""

    managed_zone: str
    #: Relative to the zone: `v5e1` becomes `v5e1.models.example.com.`.
    name: str


@dataclass(frozen=True)
class GkeSettings:
    """The GKE backend's shape: how many replicas, and which cluster they run in."""

    replicas: int
    #: Name of an existing cluster to use; "" when the stack creates its own.
    existing_cluster: str
    #: The cluster's project (the stack's, unless an existing cluster's path names another).
    cluster_project: str
    #: Where the cluster lives: the one zone of `tpu.zones`, else their region (or the location
    #: an existing cluster's path names).
    location: str
    #: The region of `tpu.zones`: where the load balancer's reserved address lives.
    region: str

    @property
    def creates_cluster(self) -> bool:
        return not self.existing_cluster


@dataclass(frozen=True)
class RenewalSettings:
    """When the next node is requested, and how long a replaced one keeps serving."""

    #: Seconds before the run ends that a renewal starts; None when nothing ends (spot,
    #: on-demand).
    lead_seconds: int | None = None
    #: Seconds a replaced, still-ACTIVE node serves on after its successor took the name.
    drain_seconds: int = renewal.DEFAULT_DRAIN_SECONDS


@dataclass(frozen=True)
class CacheSettings:
    """The XLA compile cache in Cloud Storage (components/compile_cache.py)."""

    enabled: bool = True
    #: An existing bucket to use; None means the stack creates its own.
    bucket: str | None = None
    #: Seconds the node may spend restoring; after that it starts cold.
    restore_timeout_seconds: int = 300
    #: JAX writes a persistent-cache entry only for compiles that took at least this long
    #: (`jax_persistent_cache_min_compile_time_secs`, JAX's default 1.0 s). 0: every compile, so
    #: a restored node recompiles nothing (components/jax_cache_env.py renders it).
    min_compile_seconds: float = 0.0


@dataclass(frozen=True)
class StackConfig:
    """Everything the components need, validated. Built once by `load_stack_config`."""

    project: str
    stack: str
    tpu: TpuSettings
    model: ModelSettings
    vllm: VllmSettings
    access: AccessSettings
    hourly_cost_usd: float
    #: None: clients reach the node by its IP, which changes with every renewal.
    dns: DnsSettings | None = None
    warnings: tuple[str, ...] = field(default=())
    cache: CacheSettings = field(default=CacheSettings())
    backend: Backend = DEFAULT_BACKEND
    #: Always present; only the gke backend uses it (a vm stack has one replica).
    gke: GkeSettings | None = None
    renewal: RenewalSettings = field(default=RenewalSettings())

    @property
    def replicas(self) -> int:
        """Serving replicas: `gke.replicas` on GKE, one TPU VM otherwise."""
        return self.gke.replicas if self.backend == "gke" and self.gke else 1

    @property
    def max_run_cost_usd(self) -> float | None:
        """The most one run can cost: only flex-start stops billing on its own (seed 000 §1.2)."""
        if self.tpu.max_run_seconds is None:
            return None
        return round(self.hourly_cost_usd * self.tpu.max_run_seconds / 3600, 2)


def parse_duration(text: str) -> int:
    """`4h`, `90m`, `2d`, `1h30m`, `14400s` -> seconds. Raises ValueError otherwise."""
    match = _DURATION_RE.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise ValueError(text)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def normalize_chip(name: str) -> str:
    """Accept gcloud's `v5litepod-N` spelling for `v5e-N`."""
    text = name.strip().lower()
    for family in {chip.family.name: chip.family for chip in catalog.CHIPS.values()}.values():
        prefix = f"{family.accelerator_prefix}-"
        if text.startswith(prefix):
            return f"{family.name}-{text[len(prefix) :]}"
    return text


def load_stack_config() -> StackConfig:
    """Read the stack's Pulumi config and validate it (raises ConfigError)."""
    cfg = pulumi.Config(NAMESPACE)
    sections: dict[str, Any] = {}
    problems: list[str] = []
    for section in KEYS:
        try:
            sections[section] = cfg.get_object(section)
        except Exception:  # noqa: BLE001 - Pulumi raises its own type error for non-objects
            raw = cfg.get(section)
            problems.append(
                f"{NAMESPACE}:{section} = {raw!r} is not an object. Fix: set its keys with "
                f"`pulumi config set --path '{NAMESPACE}:{section}.KEY' VALUE`."
            )
    if problems:
        raise ConfigError(problems)
    sections["backend"] = cfg.get("backend")
    return parse_stack_config(
        sections, project=pulumi.Config("gcp").get("project"), stack=pulumi.get_stack()
    )


T = TypeVar("T")


class _Reader:
    """Reads one section's keys, recording each problem instead of stopping at the first."""

    def __init__(self, section: str, raw: Any, problems: list[str]) -> None:
        self.section = section
        self.problems = problems
        self.values: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        if raw is not None and not isinstance(raw, Mapping):
            self.fail("", raw, f"not an object. Fix: set its keys, e.g. `{self.key('KEY')}`")
        for key in self.values:
            if key not in KEYS[section]:
                close = closest(key, KEYS[section])
                hint = f"Fix: did you mean `{close}`?" if close else "Fix: remove it."
                self.fail(
                    key,
                    self.values[key],
                    f"unknown key. {hint} Known keys: {', '.join(KEYS[section])}",
                )

    def key(self, name: str) -> str:
        return f"{NAMESPACE}:{self.section}.{name}" if name else f"{NAMESPACE}:{self.section}"

    def fail(self, name: str, value: Any, fix: str) -> None:
        """Record `KEY = VALUE: what is wrong. Fix: ...`; an absent value "is not set"."""
        shown = "is not set" if value is None else f"= {show(value)}"
        self.problems.append(f"{self.key(name)} {shown}: {fix}")

    def fail_choice(
        self, name: str, value: Any, what: str, choices: Sequence[str], note: str = ""
    ) -> None:
        """An unknown enum value: a did-you-mean for a near miss, and the valid values."""
        listing = " | ".join(choices)
        match = closest(value, choices)
        fix = (
            f"Fix: did you mean `{match}`? Valid: {listing}" if match else f"Fix: one of {listing}"
        )
        self.fail(name, value, f"unknown {what}{f' ({note})' if note else ''}. {fix}")

    def get(self, name: str, convert: Callable[[Any], T], default: T, what: str) -> T:
        """Convert a present value, or return the default; a bad value is recorded."""
        value = self.values.get(name)
        if value is None:
            return default
        try:
            return convert(value)
        except (TypeError, ValueError):
            self.fail(
                name,
                value,
                f"expected {what}. Fix: `pulumi config set --path '{self.key(name)}' ...`",
            )
            return default


def _format_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and value > 1 else repr(float(value))


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (int, str)):
        return int(value)
    raise TypeError(value)


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    return float(value)


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise TypeError(value)


def _as_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(value)
    return value.strip()


def _as_args(value: Any) -> tuple[str, ...]:
    """A list of arguments, or one string split as a shell would (`--a --b 2`)."""
    if isinstance(value, str):
        return tuple(shlex.split(value))
    return _as_str_list(value)


def _as_str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(value)
    if not all(isinstance(v, str) for v in value):
        raise TypeError(value)
    return tuple(cast(Sequence[str], value))


def parse_stack_config(
    sections: Mapping[str, Any], *, project: str | None, stack: str
) -> StackConfig:
    """Validate raw config sections (as `Config.get_object` returns them) into a StackConfig."""
    problems: list[str] = []
    warnings: list[str] = []
    if not project or not project.strip():
        problems.append(
            f"gcp:project = {show(project or '')}: a GCP project is required. Fix: "
            f"`pulumi config set gcp:project YOUR_PROJECT -s {stack}`."
        )
    tpu_r = _Reader("tpu", sections.get("tpu"), problems)
    model_r = _Reader("model", sections.get("model"), problems)
    vllm_r = _Reader("vllm", sections.get("vllm"), problems)
    access_r = _Reader("access", sections.get("access"), problems)
    cost_r = _Reader("cost", sections.get("cost"), problems)
    dns_r = _Reader("dns", sections.get("dns"), problems)
    gke_r = _Reader("gke", sections.get("gke"), problems)
    cache_r = _Reader("cache", sections.get("cache"), problems)
    renewal_r = _Reader("renewal", sections.get("renewal"), problems)

    backend = _parse_backend(sections.get("backend"), problems)
    chip = _parse_chip(tpu_r)
    provisioning = _parse_provisioning(tpu_r)
    max_run_seconds = _parse_max_run(tpu_r, provisioning)
    zones = _parse_zones(tpu_r, chip, provisioning, warnings, backend)
    gke = _parse_gke(
        gke_r,
        backend=backend,
        chip=chip,
        provisioning=provisioning,
        zones=zones,
        project=project,
        warnings=warnings,
    )
    runtime_version = tpu_r.get("runtimeVersion", _as_str, "", "a runtime version string")
    capacity_wait = _parse_positive_duration(tpu_r, "capacityWait", DEFAULT_CAPACITY_WAIT)

    model = _parse_model(model_r)
    vllm = _parse_vllm(vllm_r, chip)
    access = _parse_access(access_r, warnings, backend)
    cache = _parse_cache(cache_r)
    hourly_override = cost_r.get("hourlyUsd", _as_float, None, "a price in USD, e.g. 1.2")
    if hourly_override is not None and hourly_override <= 0:
        cost_r.fail("hourlyUsd", hourly_override, "must be positive. Fix: a price in USD per hour")
    dns = _parse_dns(dns_r, stack)
    renewal_settings = _parse_renewal(
        renewal_r,
        backend=backend,
        chip=chip,
        provisioning=provisioning,
        max_run_seconds=max_run_seconds,
        capacity_wait_seconds=capacity_wait,
        dns=dns,
        warnings=warnings,
    )

    if chip is not None and model is not None and vllm is not None:
        _check_fit(chip, model, vllm, problems)

    if problems:
        raise ConfigError(problems)
    assert chip is not None and provisioning is not None and model is not None
    assert vllm is not None and access is not None and project is not None
    assert backend is not None and gke is not None and renewal_settings is not None
    hourly = hourly_override if hourly_override else chip.hourly_usd(provisioning)
    if backend == "gke":
        # Every replica is a whole slice; the price is for all of them at full scale.
        hourly *= gke.replicas
    if provisioning != "flex-start":
        warnings.append(
            f"{NAMESPACE}:tpu.provisioning = {provisioning!r} has no run limit: the TPU bills "
            f"(${hourly:.2f}/h) until it is preempted or you run `pulumi destroy`."
        )
    return StackConfig(
        project=project.strip(),
        stack=stack,
        tpu=TpuSettings(
            chip=chip,
            zones=zones,
            provisioning=provisioning,
            max_run_seconds=max_run_seconds,
            runtime_version=runtime_version or chip.family.runtime_version,
            capacity_wait_seconds=capacity_wait,
        ),
        model=model,
        vllm=vllm,
        access=access,
        hourly_cost_usd=round(hourly, 4),
        dns=dns,
        warnings=tuple(warnings),
        backend=backend,
        gke=gke,
        cache=cache,
        renewal=renewal_settings,
    )


def _parse_backend(raw: Any, problems: list[str]) -> Backend | None:
    """`tpu-vllm:backend`: `vm` (the default) or `gke`; anything else names the closest one."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return DEFAULT_BACKEND
    text = raw.strip().lower() if isinstance(raw, str) else ""
    for backend in BACKENDS:
        if text == backend:
            return backend
    close = BACKEND_ALIASES.get(text) or closest(text, BACKENDS)
    listing = " | ".join(BACKENDS)
    fix = (
        f"Fix: did you mean `{close}`? Valid: {listing}"
        if close
        else f"Fix: one of {listing} (`pulumi config set {NAMESPACE}:backend gke`)"
    )
    problems.append(f"{NAMESPACE}:backend = {show(raw)}: unknown backend. {fix}")
    return None


def region_of(zone: str) -> str:
    """`us-east5-a` -> `us-east5`."""
    return zone.rsplit("-", 1)[0]


def _parse_gke(
    r: _Reader,
    *,
    backend: Backend | None,
    chip: Chip | None,
    provisioning: Provisioning | None,
    zones: tuple[str, ...],
    project: str | None,
    warnings: list[str],
) -> GkeSettings | None:
    """The `gke` section, and what the gke backend demands of the chip and zones."""
    before = len(r.problems)
    replicas = r.get("replicas", _as_int, DEFAULT_GKE_REPLICAS, "a whole number of replicas")
    if replicas < 1:
        r.fail(
            "replicas",
            replicas,
            "must be at least 1 (the node pool scales from 0 to this many TPU nodes). Fix: "
            f"`pulumi config set --path '{r.key('replicas')}' 1`, or `pulumi destroy` to stop",
        )
    cluster = r.get("cluster", _as_str, "", "a cluster name or projects/P/locations/L/clusters/N")
    path = _CLUSTER_PATH_RE.match(cluster) if cluster else None
    if cluster and not path and not _CLUSTER_NAME_RE.match(cluster):
        r.fail(
            "cluster",
            cluster,
            "not a GKE cluster name. Fix: the cluster's name (lower-case letters, digits and -, "
            "at most 40) or its path projects/PROJECT/locations/LOCATION/clusters/NAME; remove "
            "the key to let the stack create one",
        )
    if backend != "gke":
        if r.values:
            warnings.append(
                f"{NAMESPACE}:gke is set, but {NAMESPACE}:backend = "
                f"{show(backend or DEFAULT_BACKEND)}: the gke keys are ignored. Fix: set "
                f"{NAMESPACE}:backend to gke, or remove them."
            )
        if len(r.problems) != before or not zones:
            return None
        return GkeSettings(replicas, "", project or "", _location_of(zones), region_of(zones[0]))
    if chip is not None and chip.gke is None:
        r.problems.append(
            f"{NAMESPACE}:tpu.chip = {chip.name!r}: backend gke needs a single-host slice with a "
            f"GKE machine type. Fix: one of {', '.join(catalog.GKE_TPUS)}"
        )
    if chip is not None and zones:
        _check_gke_zones(r, chip, provisioning, zones)
    location = _location_of(zones) if zones else ""
    cluster_project = project or ""
    if path:
        cluster_project, location = path["project"], path["location"]
        region = location if location.count("-") == 1 else region_of(location)
        outside = [z for z in zones if not (z == location or region_of(z) == location)]
        if zones and (outside or region_of(zones[0]) != region):
            r.fail(
                "cluster",
                cluster,
                f"is in {location}, but {NAMESPACE}:tpu.zones lists {', '.join(outside or zones)}"
                ": a node pool can only use zones of its cluster. Fix: list zones of "
                f"{location} in {NAMESPACE}:tpu.zones, or name a cluster in their region",
            )
    if len(r.problems) != before or not zones:
        return None
    name = path["name"] if path else cluster
    return GkeSettings(replicas, name, cluster_project, location, region_of(zones[0]))


def _location_of(zones: Sequence[str]) -> str:
    """One zone -> a zonal cluster there; several -> a regional cluster in their region."""
    return zones[0] if len(zones) == 1 else region_of(zones[0])


def _check_gke_zones(
    r: _Reader, chip: Chip, provisioning: Provisioning | None, zones: Sequence[str]
) -> None:
    regions = sorted({region_of(z) for z in zones})
    if len(regions) > 1:
        r.problems.append(
            f"{NAMESPACE}:tpu.zones = {show(list(zones))}: backend gke runs one cluster, in one "
            f"region, but these zones span {', '.join(regions)}. Fix: list zones of one region"
        )
        return
    if provisioning != "flex-start":
        return
    offered = catalog.GKE_FLEX_START_ZONES.get(chip.family.name, ())
    missing = [z for z in zones if z not in offered]
    if missing:
        r.problems.append(
            f"{NAMESPACE}:tpu.zones = {show(list(zones))}: GKE offers flex-start "
            f'{chip.family.name} TPUs only in {", ".join(offered)} (GKE docs, "About GPU and '
            f'TPU provisioning with flex-start"), not in {", ".join(missing)}. Fix: list zones '
            f"from {', '.join(offered)}, or use backend vm (the TPU API offers more zones)"
        )


def _parse_dns(r: _Reader, stack: str) -> DnsSettings | None:
    """Both keys are optional; a name without a zone is a mistake, not a silent no-op."""
    zone = r.get("managedZone", _as_str, None, "a Cloud DNS managed zone name")
    name = r.get("name", _as_str, None, "a host name such as v5e1")
    if zone is None:
        if name is not None:
            r.fail(
                "name",
                name,
                f"has no effect without `{r.key('managedZone')}`. Fix: set the managed zone "
                f"(`pulumi config set --path '{r.key('managedZone')}' ZONE`) or remove the key",
            )
        return None
    if not _MANAGED_ZONE_RE.match(zone):
        r.fail(
            "managedZone",
            zone,
            "not a Cloud DNS managed zone name (1-63 lower-case letters, digits and dashes, "
            "starting with a letter). Fix: the zone's NAME from `gcloud dns managed-zones list`, "
            "not its DNS name",
        )
        return None
    if name is None:
        name = stack.lower()
        if not all(_DNS_LABEL_RE.match(label) for label in name.split(".")):
            r.fail(
                "name",
                None,
                f"the default, the stack name {stack!r}, is not a valid host name. Fix: "
                f"`pulumi config set --path '{r.key('name')}' NAME` with letters, digits and "
                "dashes",
            )
            return None
    elif not all(_DNS_LABEL_RE.match(label) for label in name.split(".")):
        r.fail(
            "name",
            name,
            "not a host name relative to the zone (dot-separated labels of lower-case letters, "
            "digits and dashes, at most 63 each). Fix: e.g. v5e1 or api.v5e1",
        )
        return None
    return DnsSettings(managed_zone=zone, name=name)


def _parse_chip(r: _Reader) -> Chip | None:
    raw = r.values.get("chip")
    if raw is None:
        r.fail("chip", None, f"required. Fix: one of {', '.join(catalog.CHIPS)}")
        return None
    name = normalize_chip(str(raw))
    chip = catalog.CHIPS.get(name)
    shape = _CHIP_SHAPE_RE.match(name)
    per_host = catalog.MAX_CHIPS_PER_HOST.get(shape["family"], 0) if shape else 0
    if chip is None and shape and per_host and int(shape["chips"]) > per_host:
        r.fail(
            "chip",
            raw,
            f"a multi-host slice ({shape['chips']} chips, at most {per_host} per host): one "
            "`vllm serve` runs on one host, and vLLM on TPU in GKE is single-host only. Fix: "
            f"one of {', '.join(catalog.CHIPS)}, and more replicas (backend gke) for throughput",
        )
        return None
    if chip is None:
        note = "gcloud's v5litepod-N spelling is accepted too"
        r.fail_choice("chip", raw, "chip", list(catalog.CHIPS), note)
    return chip


def _parse_provisioning(r: _Reader) -> Provisioning | None:
    raw = r.values.get("provisioning", "flex-start")
    if raw not in PROVISIONING_MODELS:
        r.fail_choice("provisioning", raw, "provisioning model", PROVISIONING_MODELS)
        return None
    return cast(Provisioning, raw)


def _parse_max_run(r: _Reader, provisioning: Provisioning | None) -> int | None:
    raw = r.values.get("maxRunDuration")
    if raw is None:
        if provisioning == "flex-start":
            r.fail(
                "maxRunDuration",
                None,
                "required for flex-start (the API stops the TPU "
                "after it). Fix: `pulumi config set --path 'tpu-vllm:tpu.maxRunDuration' 4h`",
            )
        return None
    try:
        seconds = parse_duration(raw)
    except ValueError:
        r.fail("maxRunDuration", raw, "not a duration. Fix: write it like 4h, 90m, 2d or 1h30m")
        return None
    if provisioning is None:
        return None  # the provisioning model itself is wrong, and reported
    if provisioning != "flex-start":
        r.fail(
            "maxRunDuration",
            raw,
            f"only flex-start accepts a run limit, not "
            f"{provisioning!r}. Fix: remove the key or use provisioning flex-start",
        )
        return None
    if seconds <= 0 or seconds > catalog.FLEX_START_MAX_RUN_SECONDS:
        r.fail("maxRunDuration", raw, "flex-start runs at most 7 days. Fix: use 7d or less")
        return None
    return seconds


def _parse_zones(
    r: _Reader,
    chip: Chip | None,
    provisioning: Provisioning | None,
    warnings: list[str],
    backend: Backend | None = DEFAULT_BACKEND,
) -> tuple[str, ...]:
    raw = r.values.get("zones")
    if isinstance(raw, str):  # `pulumi config set` without --path: "a, b" or one value
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        zones = _as_str_list(raw)
    except TypeError:
        r.fail(
            "zones",
            raw,
            "required: a list of candidate zones. Fix: "
            "`pulumi config set --path 'tpu-vllm:tpu.zones[0]' us-west4-a`",
        )
        return ()
    if not zones:
        r.fail("zones", list(zones), "empty. Fix: give at least one zone, e.g. [us-west4-a]")
        return ()
    bad = [z for z in zones if not _ZONE_RE.match(z)]
    if bad:
        r.fail(
            "zones",
            list(zones),
            f"{', '.join(bad)} is not a zone name. Fix: write zones like us-west4-a",
        )
        return ()
    if len(set(zones)) != len(zones):
        r.fail("zones", list(zones), "lists a zone twice. Fix: list each zone once")
        return ()
    if chip is None or provisioning != "flex-start" or backend != "vm":
        # GKE's flex-start zones are checked against its own list (`_check_gke_zones`).
        return zones
    rejected = catalog.FLEX_START_REJECTED_ZONES.get(chip.name, frozenset())
    kept = tuple(z for z in zones if z not in rejected)
    dropped = [z for z in zones if z in rejected]
    api_text = catalog.FLEX_START_REJECTION_TEXT.format(accelerator=chip.accelerator_type)
    if not kept:
        r.fail(
            "zones",
            list(zones),
            f"the TPU API rejects flex-start {chip.accelerator_type} "
            f"in every zone listed, with `{api_text}` (seed 000, measured). Fix: use "
            "us-west4-a, where it is accepted",
        )
        return ()
    if dropped:
        warnings.append(
            f"{NAMESPACE}:tpu.zones: skipping {', '.join(dropped)}: the TPU API rejects flex-start "
            f"{chip.accelerator_type} there with `{api_text}` (seed 000)."
        )
    return kept


def _parse_model(r: _Reader) -> ModelSettings | None:
    model_id = r.get("id", _as_str, "", "a Hugging Face model id like google/gemma-4-E2B-it")
    if not model_id:
        if "id" not in r.values:
            r.fail("id", None, "required. Fix: the Hugging Face model id to serve")
        return None
    entry = catalog.MODELS.get(model_id)
    weights = r.get("weightsGiB", _as_float, None, "GiB of weights in HBM, e.g. 8.97")
    if weights is not None and weights <= 0:
        r.fail("weightsGiB", weights, "must be positive. Fix: the GiB its weights take in HBM")
        return None
    if weights is None and entry is None:
        r.fail(
            "id",
            model_id,
            f"not in the catalog ({', '.join(catalog.MODELS)}), so its size "
            "is unknown. Fix: `pulumi config set --path 'tpu-vllm:model.weightsGiB' N` "
            "with the GiB its weights take in HBM",
        )
        return None
    if weights is None:
        assert entry is not None
        weights = entry.weights_gib
    return ModelSettings(id=model_id, weights_gib=weights)


def _parse_vllm(r: _Reader, chip: Chip | None) -> VllmSettings | None:
    before = len(r.problems)
    image = r.get("image", _as_str, DEFAULT_IMAGE, "an image reference")
    port = r.get("port", _as_int, VLLM_DEFAULT_PORT, "a port number")
    if not 1024 <= port <= 65535:
        r.fail(
            "port",
            port,
            "not an unprivileged port. Fix: use one in 1024-65535 (vLLM's default is 8000)",
        )
    dtype = r.get("dtype", _as_str, "bfloat16", "a dtype such as bfloat16")
    if dtype not in catalog.MODEL_DTYPES:
        note = "bfloat16 is the only one that runs Gemma 4 on TPU, seed 000 Part 2"
        r.fail_choice("dtype", dtype, "dtype", sorted(catalog.MODEL_DTYPES), note)
    kv = r.get("kvCacheDtype", _as_str, "auto", "a KV-cache dtype such as auto")
    _check_kv_cache_dtype(r, kv)
    max_model_len = r.get("maxModelLen", _as_int, None, "a token count, e.g. 32768")
    if max_model_len is not None and max_model_len <= 0:
        r.fail("maxModelLen", max_model_len, "must be positive. Fix: a token count, e.g. 32768")
    # vLLM's SchedulerConfig declares it `ge=1` (vllm/config/scheduler.py): 0 or below would
    # only fail at boot, with the TPU already billing.
    batched = r.get("maxNumBatchedTokens", _as_int, None, "a token count, e.g. 4096")
    if batched is not None and batched <= 0:
        r.fail(
            "maxNumBatchedTokens",
            batched,
            "must be positive (vLLM refuses to boot otherwise). Fix: a token count, e.g. 4096 "
            "(seed 003), or remove the key for vLLM's default",
        )
    tp = r.get("tensorParallelSize", _as_int, chip.chips if chip else 1, "an integer")
    if tp < 1:
        r.fail(
            "tensorParallelSize",
            tp,
            "must be positive. Fix: "
            + (f"set it to {chip.chips} (the chip count)" if chip else "the chip count")
            + " or remove the key",
        )
    elif chip is not None and tp != chip.chips:
        r.fail(
            "tensorParallelSize",
            tp,
            f"{chip.name} is a single host with {chip.chips} "
            f"chip(s); tensor parallelism must equal that. Fix: set it to {chip.chips} "
            "or remove the key",
        )
    util = r.get("gpuMemoryUtilization", _as_float, DEFAULT_GPU_MEMORY_UTILIZATION, "a fraction")
    if not 0 < util <= 1:
        r.fail("gpuMemoryUtilization", util, "must be in (0, 1]. Fix: e.g. 0.92 (seed 000)")
    prefix = r.get("enablePrefixCaching", _as_bool, False, "true or false")
    tool_parser = r.get("toolCallParser", _as_str, None, "a parser name such as gemma4")
    reasoning = r.get("reasoningParser", _as_str, None, "a parser name such as gemma4")
    limits = _parse_mm_limits(r)
    no_extra: tuple[str, ...] = ()
    extra = r.get("extraArgs", _as_args, no_extra, "a list of strings")
    _check_extra_args(r, extra)
    timeout = _parse_positive_duration(r, "readinessTimeout", DEFAULT_READINESS_TIMEOUT)
    if len(r.problems) != before:
        return None
    return VllmSettings(
        image=image,
        port=port,
        dtype=dtype,
        kv_cache_dtype=kv,
        max_model_len=max_model_len,
        max_num_batched_tokens=batched,
        tensor_parallel_size=tp,
        gpu_memory_utilization=util,
        enable_prefix_caching=prefix,
        tool_call_parser=tool_parser,
        reasoning_parser=reasoning,
        limit_mm_per_prompt=limits,
        extra_args=extra,
        readiness_timeout_seconds=timeout,
    )


def _parse_renewal(
    r: _Reader,
    *,
    backend: Backend | None,
    chip: Chip | None,
    provisioning: Provisioning | None,
    max_run_seconds: int | None,
    capacity_wait_seconds: int,
    dns: DnsSettings | None,
    warnings: list[str],
) -> RenewalSettings | None:
    """`renewal.lead` and `renewal.drain`: a lead that is not shorter than the run would start
    the next node as soon as this one started, paying for two all the time, so it is refused."""
    before = len(r.problems)
    drain = renewal.DEFAULT_DRAIN_SECONDS
    raw_drain = r.values.get("drain")
    if raw_drain is not None:
        try:
            drain = parse_duration(raw_drain)
        except ValueError:
            r.fail("drain", raw_drain, "not a duration. Fix: write it like 3m, 90s or 5m")
        else:
            if dns is not None and drain < renewal.RECORD_TTL_SECONDS:
                r.fail(
                    "drain",
                    raw_drain,
                    f"shorter than the DNS record's TTL ({renewal.RECORD_TTL_SECONDS} s): "
                    "resolvers may still hand out the replaced node's address after it was "
                    f"deleted. Fix: {renewal.RECORD_TTL_SECONDS}s or more (default "
                    f"{renewal.DEFAULT_DRAIN_SECONDS // 60}m: the TTL plus a margin)",
                )
    raw_lead = r.values.get("lead")
    if provisioning != "flex-start" or max_run_seconds is None:
        if raw_lead is not None and provisioning in ("spot", "on-demand"):
            warnings.append(
                f"{NAMESPACE}:renewal.lead is set, but tpu.provisioning = {provisioning!r} has "
                "no run end to renew ahead of: it is ignored. Fix: remove it."
            )
        return None if len(r.problems) != before else RenewalSettings(None, drain)
    if raw_lead is None and backend == "gke":
        lead = min(parse_duration(DEFAULT_GKE_RENEWAL_LEAD), max(max_run_seconds // 2, 1))
        return None if len(r.problems) != before else RenewalSettings(lead, drain)
    if raw_lead is None:
        if chip is None:
            return None
        lead = _default_lead(chip, capacity_wait_seconds, drain)
        if lead >= max_run_seconds:
            shortened = max_run_seconds // 2
            warnings.append(
                f"{NAMESPACE}:renewal.lead is not set and its default for this stack "
                f"({renewal.minutes(lead)}: a capacity wait plus a warm start on "
                f"{chip.family.name}, the renew schedule and the drain) is not shorter than "
                f"tpu.maxRunDuration ({renewal.minutes(max_run_seconds)}); using half the run, "
                f"{renewal.minutes(shortened)}: a renewal that waits longer for capacity leaves "
                f"a gap. Fix: set {NAMESPACE}:renewal.lead, or a longer tpu.maxRunDuration."
            )
            lead = shortened
        return None if len(r.problems) != before else RenewalSettings(lead, drain)
    try:
        lead = parse_duration(raw_lead)
        if lead <= 0:
            raise ValueError(raw_lead)
    except ValueError:
        r.fail("lead", raw_lead, "not a duration. Fix: write it like 1h, 45m or 1h30m")
        return None
    if lead >= max_run_seconds:
        r.fail(
            "lead",
            raw_lead,
            f"not shorter than {NAMESPACE}:tpu.maxRunDuration "
            f"({renewal.minutes(max_run_seconds)}): the next node would be requested as soon "
            "as each one starts, and two would bill all the time. Fix: a lead well below the "
            f"run, e.g. {renewal.minutes(min(max_run_seconds // 4, 3600))}, or a longer "
            "tpu.maxRunDuration",
        )
        return None
    if backend != "gke" and lead <= renewal.SCHEDULE_MINUTES * 60:
        warnings.append(
            f"{NAMESPACE}:renewal.lead = {show(raw_lead)} is not longer than the renew "
            f"schedule's period ({renewal.SCHEDULE_MINUTES} min, .github/workflows/renew.yml): "
            "a scheduled check may not fall inside the window, and the run then ends before "
            f"its successor is requested. Fix: a lead above {renewal.SCHEDULE_MINUTES} min."
        )
    return None if len(r.problems) != before else RenewalSettings(lead, drain)


def _default_lead(chip: Chip, capacity_wait_seconds: int, drain_seconds: int) -> int:
    """`renewal.lead`'s default (see RENEWAL_PROVISIONING_SECONDS), rounded up to 5 minutes."""
    total = (
        renewal.detection_seconds()
        + capacity_wait_seconds
        + RENEWAL_PROVISIONING_SECONDS
        + catalog.WARM_START_SECONDS[chip.family.name]
        + drain_seconds
    )
    return -(-total // RENEWAL_ROUND_SECONDS) * RENEWAL_ROUND_SECONDS


def _parse_positive_duration(r: _Reader, name: str, default: str) -> int:
    raw = r.values.get(name, default)
    try:
        seconds = parse_duration(raw)
        if seconds <= 0:
            raise ValueError(raw)
    except ValueError:
        r.fail(name, raw, "not a duration. Fix: write it like 30m, 1h or 1h30m")
        return 0
    return seconds


def _check_kv_cache_dtype(r: _Reader, kv: str) -> None:
    if kv in catalog.KV_CACHE_DTYPES:
        return
    known = ", ".join(sorted(catalog.KV_CACHE_DTYPES))
    if kv in catalog.KV_CACHE_DTYPES_KILLING_BOOT or kv.startswith(
        catalog.KV_CACHE_DTYPE_KILLING_PREFIXES
    ):
        r.fail(
            "kvCacheDtype",
            kv,
            "vLLM's CLI accepts it, then the server dies at boot on TPU "
            f"(seed 000 Part 2, measured), after you have paid for the wait. Fix: one of {known}",
        )
    elif kv in catalog.KV_CACHE_DTYPES_REJECTED_BY_CLI:
        r.fail("kvCacheDtype", kv, f"rejected by vLLM's CLI (seed 000 Part 2). Fix: one of {known}")
    else:
        r.fail_choice("kvCacheDtype", kv, "KV-cache dtype", sorted(catalog.KV_CACHE_DTYPES))


def _parse_mm_limits(r: _Reader) -> tuple[tuple[str, int], ...] | None:
    raw = r.values.get("limitMmPerPrompt")
    if raw is None:
        return None
    if isinstance(raw, str):  # the flag's own JSON, as vLLM takes it: '{"image":4}'
        with contextlib.suppress(ValueError):
            raw = json.loads(raw)
    if not isinstance(raw, Mapping) or not raw:
        r.fail(
            "limitMmPerPrompt", raw, "not an object. Fix: an object such as {image: 4, audio: 1}"
        )
        return None
    limits: dict[str, int] = {}
    for modality, count in raw.items():
        try:
            limits[str(modality)] = _as_int(count)
        except (TypeError, ValueError):
            r.fail(
                f"limitMmPerPrompt.{modality}", count, "not a count. Fix: a non-negative integer"
            )
            return None
        if limits[str(modality)] < 0:
            r.fail(
                f"limitMmPerPrompt.{modality}", count, "not a count. Fix: a non-negative integer"
            )
            return None
    order = [m for m in MM_MODALITY_ORDER if m in limits] + sorted(
        m for m in limits if m not in MM_MODALITY_ORDER
    )
    return tuple((m, limits[m]) for m in order)


def _check_extra_args(r: _Reader, extra: Sequence[str]) -> None:
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in FORBIDDEN_FLAGS:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} would put a secret on the command line; "
                f"{FORBIDDEN_FLAGS[flag]}. Fix: remove it",
            )
        elif flag in FLAG_KEYS:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} has a key of its own. Fix: set `{NAMESPACE}:{FLAG_KEYS[flag]}` instead",
            )
    for flag, value in _flag_values(extra, POSITIVE_INT_FLAGS):
        try:
            positive = _as_int(value) >= 1
        except (TypeError, ValueError):
            positive = False
        if not positive:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} takes a positive integer (here "
                f"{'nothing follows it' if value is None else show(value)}); vLLM refuses to "
                f"boot otherwise. Fix: a whole number of at least 1 after {flag}, or drop it",
            )


def _flag_values(extra: Sequence[str], flags: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for each of `flags` in `extra`, as `--flag VALUE` or `--flag=VALUE`; the
    value is None when the flag ends the list."""
    found: list[tuple[str, str | None]] = []
    for index, arg in enumerate(extra):
        flag, equals, value = arg.partition("=")
        if flag not in flags:
            continue
        if equals:
            found.append((flag, value))
        else:
            found.append((flag, extra[index + 1] if index + 1 < len(extra) else None))
    return found


def _blocked_dial_minutes() -> int:
    """How long remote commands dial a node whose firewall drops the deployer's packets: every
    dial times out (`per_dial_timeout`) between pulumi-command's backoff waits (~32 min)."""
    return round(dial_budget_seconds(seconds_per_failed_dial=PER_DIAL_TIMEOUT_SECONDS) / 60)


def _parse_access(
    r: _Reader, warnings: list[str], backend: Backend | None = DEFAULT_BACKEND
) -> AccessSettings | None:
    before = len(r.problems)
    allow_public = r.get("allowPublic", _as_bool, False, "true or false")
    allowed = _parse_cidrs(r, "allowedCidrs", allow_public, required=True)
    ssh = _parse_cidrs(r, "sshCidrs", allow_public, required=False)
    secret = r.get("hfTokenSecret", _as_str, DEFAULT_HF_TOKEN_SECRET, "a secret name")
    if not _SECRET_ID_RE.match(secret):
        r.fail(
            "hfTokenSecret",
            secret,
            "not a Secret Manager secret id. Fix: letters, digits, _ and -, at most 255",
        )
    unverified = r.get("allowUnverifiedHostKey", _as_bool, False, "true or false")
    network = r.get("network", _as_str, DEFAULT_NETWORK, "a VPC network name")
    if not _NETWORK_RE.match(network):
        r.fail(
            "network",
            network,
            "not a VPC network name. Fix: the name of a network in gcp:project (lowercase "
            "letters, digits and -, e.g. default; `gcloud compute networks list` shows them)",
        )
    if len(r.problems) != before or allowed is None:
        return None
    for cidr in allowed + (ssh or ()):
        net = ipaddress.ip_network(cidr)
        if any(net.version == d.version and net.subnet_of(d) for d in _DOC_NETS):  # type: ignore[arg-type]
            warnings.append(
                f"{NAMESPACE}:access: {cidr} is a documentation range that nobody can come "
                "from; replace it with your own network before relying on the endpoint."
            )
    if backend == "gke":
        # No SSH on GKE: the pods are reached through the load balancer only.
        ignored = [k for k in ("sshCidrs", "allowUnverifiedHostKey") if k in r.values]
        if ignored:
            warnings.append(
                f"{NAMESPACE}:access.{', access.'.join(ignored)} is set, but backend gke has no "
                "SSH: it is ignored. Fix: remove it from the stack file."
            )
    elif ssh is None:
        # The deployer dials port 22: outside these ranges the node's deny rule drops its
        # packets (a VPC firewall sends no reset), so every dial waits out per_dial_timeout
        # and `up` fails after ssh.dial_budget_seconds of a billing TPU. Kept short: the plan
        # shows warnings one per line.
        warnings.append(
            f"{NAMESPACE}:access.sshCidrs is not set, so SSH admits only allowedCidrs "
            f"({', '.join(allowed)}); from outside, `pulumi up` fails after "
            f"~{_blocked_dial_minutes()} min. Fix: set {NAMESPACE}:access.sshCidrs to YOUR.IP/32."
        )
    return AccessSettings(
        allowed_cidrs=allowed,
        allow_public=allow_public,
        ssh_cidrs=ssh if ssh is not None else allowed,
        hf_token_secret=secret,
        allow_unverified_host_key=unverified,
        network=network,
    )


def _parse_cache(r: _Reader) -> CacheSettings:
    enabled = r.get("enabled", _as_bool, True, "true or false")
    bucket = r.get("bucket", _as_str, None, "a Cloud Storage bucket name")
    if bucket is not None:
        bucket = bucket.removeprefix("gs://").rstrip("/")
        if not _BUCKET_RE.match(bucket) or ".." in bucket or bucket.startswith("goog"):
            r.fail(
                "bucket",
                bucket,
                "not a Cloud Storage bucket name. Fix: 3-63 lowercase letters, digits, "
                "'-', '_' and '.', e.g. my-project-xla-cache, or remove the key to let the "
                "stack create its own bucket",
            )
            bucket = None
    timeout = _parse_positive_duration(r, "restoreTimeout", DEFAULT_CACHE_RESTORE_TIMEOUT)
    min_compile = _parse_min_compile_seconds(r)
    return CacheSettings(
        enabled=enabled,
        bucket=bucket,
        restore_timeout_seconds=timeout,
        min_compile_seconds=min_compile,
    )


def _parse_min_compile_seconds(r: _Reader) -> float:
    """`cache.minCompileSeconds`: a finite number of seconds >= 0 (JAX reads it with float())."""
    what = "a number of seconds >= 0, e.g. 0 (cache every compile) or 1.0 (JAX's own default)"
    value = r.get("minCompileSeconds", _as_float, None, what)
    if value is not None and not (math.isfinite(value) and value >= 0):
        r.fail(
            "minCompileSeconds",
            r.values.get("minCompileSeconds"),
            f"must be a finite number of seconds >= 0. Fix: {what}, or remove the key "
            "for the default 0",
        )
        return 0.0
    return 0.0 if value is None else value


def _parse_cidrs(
    r: _Reader, name: str, allow_public: bool, *, required: bool
) -> tuple[str, ...] | None:
    raw = r.values.get(name)
    if raw is None:
        if required:
            r.fail(
                name,
                None,
                "required: who may reach the endpoint. Fix: `pulumi config set "
                f"--path '{r.key(name)}[0]' 203.0.113.0/24` with your own range",
            )
        return None
    if isinstance(raw, str):  # `pulumi config set` without --path: "a, b" or one value
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        cidrs = _as_str_list(raw)
    except TypeError:
        r.fail(name, raw, "not a list. Fix: a list of CIDR ranges such as [10.0.0.0/8]")
        return None
    if not cidrs:
        r.fail(name, [], "empty: nobody could reach the node. Fix: give at least one CIDR range")
        return None
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            r.fail(
                name,
                list(cidrs),
                f"{cidr!r} is not a CIDR range like 203.0.113.0/24 "
                "(host bits must be zero). Fix: write the network address",
            )
            return None
        if net.prefixlen == 0 and not allow_public:
            r.fail(
                name,
                list(cidrs),
                f"{cidr} opens the port to the whole internet, and "
                "/metrics, /health and /tokenize answer without the API key. Fix: list your "
                "own ranges, or set `tpu-vllm:access.allowPublic` true if you mean it",
            )
            return None
    return cidrs


def _check_fit(chip: Chip, model: ModelSettings, vllm: VllmSettings, problems: list[str]) -> None:
    usable = round(chip.hbm_gib * vllm.gpu_memory_utilization, 2)
    if model.weights_gib < usable:
        return
    fits = [
        c.name
        for c in catalog.CHIPS.values()
        if model.weights_gib < c.hbm_gib * vllm.gpu_memory_utilization
    ]
    hint = f"a chip whose HBM holds it ({', '.join(fits)})" if fits else "a smaller model"
    problems.append(
        f"{NAMESPACE}:model.id = {model.id!r} does not fit {NAMESPACE}:tpu.chip = "
        f"{chip.name!r}: {model.weights_gib:.2f} GiB of weights vs {usable:.2f} GiB usable HBM "
        f"({chip.chips} chip(s) x {chip.family.hbm_gib_per_chip:.2f} GiB HBM x "
        f"gpuMemoryUtilization {vllm.gpu_memory_utilization} = {usable:.2f} GiB), with nothing "
        f"left for the KV cache. Fix: use {hint}"
    )
