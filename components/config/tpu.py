"""The `tpu` section: the chip, the zones to try, the provisioning model and its run limit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from components import catalog
from components.catalog import Chip, Provisioning
from components.config.backend import DEFAULT_BACKEND, Backend
from components.config.keys import NAMESPACE
from components.config.reader import Reader, as_str_list, parse_duration

DEFAULT_CAPACITY_WAIT = "30m"  # per zone; the queued request expires after it.
PROVISIONING_MODELS: tuple[Provisioning, ...] = ("flex-start", "spot", "on-demand")
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_CHIP_SHAPE_RE = re.compile(r"^(?P<family>v[0-9]+[a-z]*)-(?P<chips>[0-9]+)$")


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


def normalize_chip(name: str) -> str:
    """Accept gcloud's `v5litepod-N` spelling for `v5e-N`."""
    text = name.strip().lower()
    for family in {chip.family.name: chip.family for chip in catalog.CHIPS.values()}.values():
        prefix = f"{family.accelerator_prefix}-"
        if text.startswith(prefix):
            return f"{family.name}-{text[len(prefix) :]}"
    return text


def parse_chip(r: Reader) -> Chip | None:
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


def parse_provisioning(r: Reader) -> Provisioning | None:
    raw = r.values.get("provisioning", "flex-start")
    if raw not in PROVISIONING_MODELS:
        r.fail_choice("provisioning", raw, "provisioning model", PROVISIONING_MODELS)
        return None
    return cast(Provisioning, raw)


def parse_max_run(r: Reader, provisioning: Provisioning | None) -> int | None:
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


def parse_zones(
    r: Reader,
    chip: Chip | None,
    provisioning: Provisioning | None,
    warnings: list[str],
    backend: Backend | None = DEFAULT_BACKEND,
) -> tuple[str, ...]:
    raw = r.values.get("zones")
    if isinstance(raw, str):  # `pulumi config set` without --path: "a, b" or one value
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        zones = as_str_list(raw)
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
            f"in every zone listed, with `{api_text}` (measured). Fix: use "
            "us-west4-a, where it is accepted",
        )
        return ()
    if dropped:
        warnings.append(
            f"{NAMESPACE}:tpu.zones: skipping {', '.join(dropped)}: the TPU API rejects flex-start "
            f"{chip.accelerator_type} there with `{api_text}` (measured)."
        )
    return kept
