"""The loader: the stack's Pulumi config in, one validated, immutable `StackConfig` out.

A TPU hour is paid for whether the server boots or not, so every mistake the config package can
see is raised here, in one error, before a single resource is registered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components.config.access import AccessSettings, parse_access
from components.config.backend import DEFAULT_BACKEND, Backend, parse_backend
from components.config.cache import CacheSettings, parse_cache
from components.config.cost import hourly_cost, parse_cost
from components.config.dns import DnsSettings, parse_dns
from components.config.gke import GkeSettings, parse_gke
from components.config.keys import KEYS, NAMESPACE
from components.config.model import ModelSettings, check_fit, parse_model
from components.config.monitoring import MonitoringSettings, parse_monitoring
from components.config.reader import ConfigError, Reader, as_str, parse_positive_duration
from components.config.renewal import RenewalSettings, parse_renewal
from components.config.sections import ServerSettings, WorkloadSettings
from components.config.tpu import (
    DEFAULT_CAPACITY_WAIT,
    TpuSettings,
    parse_chip,
    parse_max_run,
    parse_provisioning,
    parse_zones,
)
from components.config.vllm import VllmSettings, parse_vllm
from components.messages import show


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
    #: Always present; only the gke backend uses it (a vm stack has one replica).
    gke: GkeSettings
    #: None: clients reach the node by its IP, which changes with every renewal.
    dns: DnsSettings | None = None
    warnings: tuple[str, ...] = field(default=())
    cache: CacheSettings = field(default=CacheSettings())
    backend: Backend = DEFAULT_BACKEND
    renewal: RenewalSettings = field(default=RenewalSettings())
    monitoring: MonitoringSettings = field(default=MonitoringSettings())

    def server_settings(self) -> ServerSettings:
        """The sections the VM's server is rendered from (components/config/sections.py)."""
        return ServerSettings(
            project=self.project,
            stack=self.stack,
            tpu=self.tpu,
            model=self.model,
            vllm=self.vllm,
            cache=self.cache,
            monitoring=self.monitoring,
        )

    def workload_settings(self) -> WorkloadSettings:
        """The sections the GKE workload is rendered from."""
        return WorkloadSettings(
            project=self.project,
            stack=self.stack,
            tpu=self.tpu,
            model=self.model,
            vllm=self.vllm,
            cache=self.cache,
            monitoring=self.monitoring,
            access=self.access,
            renewal=self.renewal,
            replicas=self.replicas,
        )

    @property
    def replicas(self) -> int:
        return self.gke.replicas if self.backend == "gke" else 1

    @property
    def max_run_cost_usd(self) -> float | None:
        """The most one run can cost: only flex-start stops billing on its own."""
        if self.tpu.max_run_seconds is None:
            return None
        return round(self.hourly_cost_usd * self.tpu.max_run_seconds / 3600, 2)


def stray_key_problems(names: Iterable[str]) -> list[str]:
    """Config keys of the namespace that no section holds, each with its fix: `pulumi config
    set tpu-vllm:tpu.chip v6e-4` without `--path` stores a key named `tpu.chip` that is never
    read, and the default would be used (tests/engine/test_engine_failures.py)."""
    problems = []
    for name in sorted(names):
        namespace, _, key = name.partition(":")
        if namespace != NAMESPACE or key in KEYS or key == "backend":
            continue
        section, dot, _ = key.partition(".")
        if dot and section in KEYS:
            problems.append(
                f"{NAMESPACE}:{key} is set as a single key named {key!r}, which is never read: "
                f"the `{NAMESPACE}:{section}` object holds the section's keys. Fix: `pulumi "
                f"config rm {NAMESPACE}:{key}`, then `pulumi config set --path "
                f"'{NAMESPACE}:{key}' VALUE`."
            )
        else:
            problems.append(
                f"{NAMESPACE}:{key} is not a tpu-vllm setting. Fix: remove it (`pulumi config "
                f"rm {NAMESPACE}:{key}`); the sections are {', '.join(KEYS)} and backend."
            )
    return problems


def load_stack_config() -> StackConfig:
    cfg = pulumi.Config(NAMESPACE)
    sections: dict[str, Any] = {}
    # From the language host (PULUMI_CONFIG), or the SDK's own map (inline programs, mocks).
    problems = stray_key_problems({*runtime_config.CONFIG.get(), *runtime_config.get_config_env()})
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


def parse_stack_config(
    sections: Mapping[str, Any], *, project: str | None, stack: str
) -> StackConfig:
    """Validate raw config sections (as `Config.get_object` returns them)."""
    problems: list[str] = []
    warnings: list[str] = []
    if not project or not project.strip():
        problems.append(
            f"gcp:project = {show(project or '')}: a GCP project is required. Fix: "
            f"`pulumi config set gcp:project YOUR_PROJECT -s {stack}`."
        )
    tpu_r = Reader("tpu", sections.get("tpu"), problems)
    model_r = Reader("model", sections.get("model"), problems)
    vllm_r = Reader("vllm", sections.get("vllm"), problems)
    access_r = Reader("access", sections.get("access"), problems)
    cost_r = Reader("cost", sections.get("cost"), problems)
    dns_r = Reader("dns", sections.get("dns"), problems)
    gke_r = Reader("gke", sections.get("gke"), problems)
    cache_r = Reader("cache", sections.get("cache"), problems)
    renewal_r = Reader("renewal", sections.get("renewal"), problems)
    monitoring_r = Reader("monitoring", sections.get("monitoring"), problems)

    backend = parse_backend(sections.get("backend"), problems)
    chip = parse_chip(tpu_r)
    provisioning = parse_provisioning(tpu_r)
    max_run_seconds = parse_max_run(tpu_r, provisioning)
    zones = parse_zones(tpu_r, chip, provisioning, warnings, backend)
    gke = parse_gke(
        gke_r,
        backend=backend,
        chip=chip,
        provisioning=provisioning,
        zones=zones,
        project=project,
        warnings=warnings,
    )
    runtime_version = tpu_r.get("runtimeVersion", as_str, "", "a runtime version string")
    capacity_wait = parse_positive_duration(tpu_r, "capacityWait", DEFAULT_CAPACITY_WAIT)

    model = parse_model(model_r)
    vllm = parse_vllm(vllm_r, chip)
    access = parse_access(access_r, warnings, backend)
    cache = parse_cache(cache_r)
    monitoring = parse_monitoring(monitoring_r)
    hourly_override = parse_cost(cost_r)
    dns = parse_dns(dns_r, stack)
    renewal_settings = parse_renewal(
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
        check_fit(chip, model, vllm, problems)

    if problems:
        raise ConfigError(problems)
    assert chip is not None and provisioning is not None and model is not None
    assert vllm is not None and access is not None and project is not None
    assert backend is not None and gke is not None and renewal_settings is not None
    hourly = hourly_cost(
        hourly_override,
        chip=chip,
        provisioning=provisioning,
        backend=backend,
        gke=gke,
        warnings=warnings,
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
        monitoring=monitoring,
    )
