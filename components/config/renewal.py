"""The `renewal` section: when the next node is requested, and how long a replaced one serves.

The windows and schedules themselves live in components/renewal.py (shared by both backends and
scripts/renew.py); this module only reads and checks the keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from components import catalog, renewal
from components.catalog import Chip, Provisioning
from components.config.backend import Backend
from components.config.dns import DnsSettings
from components.config.keys import NAMESPACE
from components.config.reader import Reader, parse_duration
from components.messages import show

# `renewal.lead` by default on GKE (the ComputeClass's nodeRecycling.leadTimeSeconds): a capacity
# wait (30 min, tpu.capacityWait's default) plus a warm start (497 s on v5e-1, seed 000 §1.3; the
# 31B start on v6e-4 is longer), rounded up to the hour GoogleCloudPlatform/accelerated-platforms'
# v6e ComputeClass uses (platforms/gke/base/core/custom_compute_class/templates/manifests/tpu/v6e/
# custom-compute-tpu-v6e-2x2.yaml, leadTimeSeconds: 3600). No renew schedule or DNS drain is in
# it: GKE itself seeks the node and the Service's address never moves. At most half of a
# shorter run. The VM backend's default is computed per chip (`_default_lead`).
DEFAULT_GKE_RENEWAL_LEAD = "1h"
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


@dataclass(frozen=True)
class RenewalSettings:
    """When the next node is requested, and how long a replaced one keeps serving."""

    #: Seconds before the run ends that a renewal starts; None when nothing ends (spot,
    #: on-demand).
    lead_seconds: int | None = None
    #: Seconds a replaced, still-ACTIVE node serves on after its successor took the name.
    drain_seconds: int = renewal.DEFAULT_DRAIN_SECONDS


def parse_renewal(
    r: Reader,
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
