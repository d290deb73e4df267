"""The `renewal` section: when the next node is requested, and how long a replaced one serves.
The windows themselves are in components/renewal.py."""

from __future__ import annotations

from dataclasses import dataclass

from components import catalog, renewal
from components.catalog import Chip, Provisioning
from components.config.backend import Backend
from components.config.dns import DnsSettings
from components.config.keys import NAMESPACE
from components.config.reader import Reader, parse_duration
from components.messages import show

# GKE's default: a capacity wait plus a warm start, rounded up to the hour accelerated-platforms'
# v6e ComputeClass uses (leadTimeSeconds: 3600); no schedule or drain, GKE seeks the node itself.
DEFAULT_GKE_RENEWAL_LEAD = "1h"
# The VM's default (`_default_lead`) holds all that must happen before the run ends: a scheduled
# check noticing, a capacity wait, provisioning (an estimate: never measured), a warm start and the
# drain (docs/configuration.md, `renewal.lead`).
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
    """`renewal.lead` and `renewal.drain`; a lead not shorter than the run would pay for two
    nodes all the time, so it is refused."""
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
    """`renewal.lead`'s default, rounded up to 5 minutes."""
    total = (
        renewal.detection_seconds()
        + capacity_wait_seconds
        + RENEWAL_PROVISIONING_SECONDS
        + catalog.WARM_START_SECONDS[chip.family.name]
        + drain_seconds
    )
    return -(-total // RENEWAL_ROUND_SECONDS) * RENEWAL_ROUND_SECONDS
