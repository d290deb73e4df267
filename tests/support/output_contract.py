"""The stack outputs' contract, one definition for every layer that checks it.

Which outputs exist, their types and secrecy, and which may hold their documented empty value or
be absent: by backend, and by the stack's config (the uptime check off by default, monitoring or
the compile cache off, a provisioning with no run end). The mock-level tests
(tests/mocked/test_output_contract.py) and the engine stack tests (tests/engine/test_engine_v5e1.py)
both ask `expected(config)` and `problems(...)` here, so a new output or a changed config default
cannot leave one of them behind. What only a state of the world explains (an expired node, a log
without a memory line) is the situation's own, passed as `world_empty` / `world_absent`.

The Pulumi engine drops an output whose value is None (pulumi/runtime/rpc.py
`serialize_properties`): so each output is either always present, with a documented empty value
when it does not apply, or documented as optional (docs/outputs.md, "The contract").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.config.loader import StackConfig, parse_stack_config

NUMBER = (int, float)
STR = (str,)


@dataclass(frozen=True)
class Out:
    """One stack output, as other services may rely on it."""

    types: tuple[type, ...]
    #: A Pulumi secret: `pulumi stack output NAME --show-secrets` to read it.
    secret: bool = False
    #: Always present, but this value ("" / {}) means "does not apply"; README says when.
    #: None: the output always has a real value.
    empty: Any = None
    #: May be absent (it has no value then): consumers read it with `get_output`, never
    #: `require_output`. README's type column says "optional".
    optional: bool = False


CONTRACT: dict[str, Out] = {
    "endpoint": Out(STR, empty=""),  # "" only if the node has no external IP
    "endpoint_ip": Out(STR, empty=""),  # "" only if the node has no external IP
    "openai_base_url": Out(STR, empty=""),
    "model": Out(STR),
    "api_key": Out(STR, secret=True),
    "api_key_secret": Out(STR),
    "zone": Out(STR, empty=""),  # "" on GKE: replicas land in any of `zones`
    "chip": Out(STR),
    "queued_resource": Out(STR, empty=""),  # "" on GKE
    "node": Out(STR, empty=""),  # "" on GKE
    "external_ip": Out(STR, empty=""),  # "" once an expired node was refreshed
    "internal_ip": Out(STR, empty=""),
    "expires_at": Out(STR, empty=""),  # "" for spot / on-demand, and on GKE
    "renew_command": Out(STR, empty=""),  # "" on GKE: it replaces an ended node itself
    # How long before expires_at the next node is requested; absent without a run end (spot,
    # on-demand) and on GKE.
    "renewal_lead_seconds": Out((int,), optional=True),
    "ssh_command": Out(STR, empty=""),  # "" on GKE: no SSH
    "ssh_private_key": Out(STR, secret=True, empty=""),  # a secret "" on GKE
    "ssh_host_key": Out(STR, empty=""),  # "" with access.allowUnverifiedHostKey and no key
    "hourly_cost_usd": Out(NUMBER),
    "max_run_cost_usd": Out(NUMBER, optional=True),  # absent for spot / on-demand
    "hbm": Out((dict,), empty={}),  # {} if vLLM logged no `Memory statistics` line
    "startup_seconds": Out(NUMBER, optional=True),  # absent if no readiness result was recorded
    # From "startup complete" to the model's first good answer; absent where not measured.
    "first_answer_seconds": Out(NUMBER, optional=True),
    "zones": Out((list,)),
    "image": Out(STR),  # NAME@sha256:DIGEST, the pinned image (components/image_pin.py)
    "vllm_args": Out((list,)),
    "compile_cache": Out(STR, empty=""),  # "" when tpu-vllm:cache.enabled is false
    # Always the full object: {"restored": false, "generation": "", ...} when off or not known.
    "cache_restored": Out((dict,)),
    "replicas": Out((int,)),  # 1 on the VM backend
    "cluster": Out(STR, empty=""),  # "" on the VM backend
    "dashboard_url": Out(STR, empty=""),  # "" when tpu-vllm:monitoring.enabled is false
    # "" on the VM backend when monitoring.enabled is false: the log stays on the node then.
    "logs_command": Out(STR, empty=""),
    "logs_url": Out(STR, empty=""),
    "uptime_check": Out(STR, empty=""),  # "" without tpu-vllm:monitoring.uptimeCheck
}
OPTIONAL = {name for name, out in CONTRACT.items() if out.optional}

#: Outputs that mean nothing on a backend: their empty value in every situation of it.
BACKEND_EMPTY = {
    "vm": frozenset({"cluster"}),
    "gke": frozenset(
        {
            "zone",
            "queued_resource",
            "node",
            "internal_ip",
            "expires_at",
            "renew_command",
            "ssh_command",
            "ssh_private_key",
            "ssh_host_key",
            "hbm",
        }
    ),
}
#: Optional outputs a backend never has: each GKE replica starts on its own.
BACKEND_ABSENT = {
    "vm": frozenset[str](),
    "gke": frozenset({"startup_seconds", "first_answer_seconds", "renewal_lead_seconds"}),
}


#: Outputs that only the VM backend empties when monitoring is off: the log stays on the node.
VM_LOG_OUTPUTS = frozenset({"logs_command", "logs_url"})


@dataclass(frozen=True)
class Expectation:
    """Outputs that must hold their empty value, and optional outputs that must be absent."""

    empty: frozenset[str]
    absent: frozenset[str]


def expected(config: StackConfig) -> Expectation:
    """What the contract says of a stack with this config, before any state of the world."""
    backend = config.backend
    empty = set(BACKEND_EMPTY[backend])
    absent = set(BACKEND_ABSENT[backend])
    if not config.monitoring.uptime_check:  # off by default
        empty.add("uptime_check")
    if not config.monitoring.enabled:
        empty.add("dashboard_url")
        if backend == "vm":  # GKE's logging agent ships container logs whatever the stack says
            empty |= VM_LOG_OUTPUTS
    if not config.cache.enabled:
        empty.add("compile_cache")
    if config.tpu.max_run_seconds is None:  # spot / on-demand: no run end, no bound on a run
        absent.add("max_run_cost_usd")
        if backend == "vm":
            empty.add("expires_at")
            absent.add("renewal_lead_seconds")
    return Expectation(frozenset(empty), frozenset(absent))


def config_of(raw: Mapping[str, Any], *, stack: str, project: str = "test-project") -> StackConfig:
    """A StackConfig from a stack's config map (`Pulumi.<stack>.yaml`'s `config:`, or
    `pulumi config --json`'s values), validated by the program's own loader."""
    sections = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("tpu-vllm:")}
    return parse_stack_config(sections, project=project, stack=stack)


def problems(
    shown: Mapping[str, Any],
    *,
    config: StackConfig,
    secret: set[str] | frozenset[str],
    world_empty: frozenset[str] = frozenset(),
    world_absent: frozenset[str] = frozenset(),
) -> list[str]:
    """Every way `shown` (the outputs with secrets revealed; `secret`: the names that were
    secret) breaks the contract for this config and state of the world; [] when it holds."""
    expect = expected(config)
    empty, absent = expect.empty | world_empty, expect.absent | world_absent
    found: list[str] = []
    if unknown := set(shown) - set(CONTRACT):
        found.append(f"outputs not in the contract (add them to it and to README): {unknown}")
    if missing := (set(CONTRACT) - absent) - set(shown):
        found.append(f"outputs absent (None is dropped by the engine): {sorted(missing)}")
    if extra := absent & set(shown):
        found.append(f"outputs present that must be absent here: {sorted(extra)}")
    for name, value in shown.items():
        out = CONTRACT.get(name)
        if out is None:
            continue
        if not isinstance(value, out.types):
            found.append(f"{name} = {value!r} is not {out.types}")
        if (name in secret) != out.secret:
            found.append(f"{name} is {'' if name in secret else 'not '}secret")
        if name in empty and value != out.empty:
            found.append(f"{name} = {value!r}, but its empty value {out.empty!r} is expected")
        elif name not in empty and out.empty is not None and value == out.empty:
            found.append(f"{name} is empty ({value!r}), but nothing here explains that")
    return found
