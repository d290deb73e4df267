"""The `cost` section: the hourly price the outputs and warnings state, and its override."""

from __future__ import annotations

from components.catalog import Chip, Provisioning
from components.config.backend import Backend
from components.config.gke import GkeSettings
from components.config.keys import NAMESPACE
from components.config.reader import Reader, as_float


def parse_cost(r: Reader) -> float | None:
    """`cost.hourlyUsd`: a positive price for the whole slice, or None (the catalog's)."""
    hourly_override = r.get("hourlyUsd", as_float, None, "a price in USD, e.g. 1.2")
    if hourly_override is not None and hourly_override <= 0:
        r.fail("hourlyUsd", hourly_override, "must be positive. Fix: a price in USD per hour")
    return hourly_override


def hourly_cost(
    hourly_override: float | None,
    *,
    chip: Chip,
    provisioning: Provisioning,
    backend: Backend,
    gke: GkeSettings,
    warnings: list[str],
) -> float:
    """What the stack bills per hour at full scale; a warning when nothing stops the billing."""
    hourly = hourly_override if hourly_override else chip.hourly_usd(provisioning)
    if backend == "gke":
        # Every replica is a whole slice; the price is for all of them at full scale.
        hourly *= gke.replicas
    if provisioning != "flex-start":
        warnings.append(
            f"{NAMESPACE}:tpu.provisioning = {provisioning!r} has no run limit: the TPU bills "
            f"(${hourly:.2f}/h) until it is preempted or you run `pulumi destroy`."
        )
    return hourly
