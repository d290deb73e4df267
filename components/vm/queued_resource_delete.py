"""Deleting a queued resource: the drain of a replaced node that still serves, then the
force-delete, retried while the API refuses it in PROVISIONING, and waited on until it is gone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from components import renewal
from components.vm.queued_resource_spec import (
    SLOTS,
    UNDELETABLE_STATES,
    Spec,
    Timing,
    of_this_stack,
)
from components.vm.tpu_api import ApiError, TpuApi, poll_delays, report

#: Longest pause between two progress lines while a replaced node drains.
DRAIN_REPORT_SECONDS = 30.0


def drain_if_succeeded(api: TpuApi, spec: Spec, name: str) -> None:
    """Wait `spec.drain_seconds` before deleting a TPU that serves while a successor does, so
    clients that cached its address finish (docs/renewal.md, "The renewal window")."""
    if spec.drain_seconds <= 0 or _state_or_gone(api, name) != "ACTIVE":
        return
    successor = _serving_successor(api, spec, name)
    if successor is None:
        return
    drain, timing = spec.drain_seconds, spec.timing
    report(
        f"draining {name}: its successor {successor} serves and the DNS name has moved to it; "
        f"{name} keeps serving for {renewal.minutes(drain)} (renewal.drain: the record's TTL "
        "plus a margin) so clients that cached its address finish, then it is deleted"
    )
    start = time.monotonic()
    last_report = start
    while True:
        left = drain - (time.monotonic() - start)
        if left <= 0:
            report(f"{name} drained for {renewal.minutes(drain)}; deleting it")
            return
        time.sleep(min(left, max(timing.poll_seconds, 1e-3), DRAIN_REPORT_SECONDS))
        state = _state_or_gone(api, name)
        if state != "ACTIVE":
            report(f"{name} is {state} before the drain ended (its run is over); deleting it")
            return
        now = time.monotonic()
        if now - last_report >= DRAIN_REPORT_SECONDS:
            report(f"draining {name}: {renewal.minutes(drain - (now - start))} left")
            last_report = now


def _serving_successor(api: TpuApi, spec: Spec, name: str) -> str | None:
    """Another ACTIVE queued resource of this stack, under either id pair, in any of its zones
    (a successor may hold this TPU's own ids in another zone), or None."""
    zone = name.split("/locations/", 1)[1].split("/", 1)[0] if "/locations/" in name else ""
    for candidate_zone in dict.fromkeys([zone, *spec.zones]):
        if not candidate_zone:
            continue
        for slot in SLOTS:
            candidate = spec.in_slot(slot)
            other = candidate.qr_name(candidate_zone)
            if other == name:
                continue
            try:
                qr = api.get_queued_resource(other)
            except ApiError as error:
                if error.http_status == 404:
                    continue
                raise
            state = str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))
            if state == "ACTIVE" and of_this_stack(api, candidate, candidate_zone, qr):
                return other
    return None


#: Refusals that show the API found the resource: it judged its state.
EXISTS_REFUSALS = frozenset({400, 409})


def delete_and_wait(api: TpuApi, name: str, timing: Timing, *, just_created: bool = False) -> None:
    """Force-delete (nodes first) and wait until it is gone; gone already counts as success.

    Any refusal is retried while the state is PROVISIONING or CREATING; a 404 read right after
    a 400/409 refusal, or a 404 DELETE of a resource `just_created`, may only be "not visible
    yet" and is retried within the grace. Why: docs/tpu-request.md, "Cleaning up after a
    failure"."""
    start = time.monotonic()
    deadline = start + timing.delete_timeout_seconds
    unsure_until = min(start + timing.consistency_grace_seconds, deadline)
    unsure_delays = poll_delays(timing.poll_seconds)
    delay = timing.poll_seconds
    tried_again = False  # the last refusal's read-back was a deletable state
    while True:
        refusal: ApiError | None
        try:
            operation = api.delete_queued_resource(name)
        except ApiError as error:
            refusal = error
        else:
            refusal = _wait_gone(
                api,
                name,
                operation,
                timing=timing,
                since=start,
                until=deadline,
                unsure_until=unsure_until,
            )
            if refusal is None:
                return
        if refusal.http_status == 404 and just_created and time.monotonic() < unsure_until:
            report(f"{name}: the delete found nothing yet (404), but it was just created; retrying")
            time.sleep(max(0.0, min(next(unsure_delays), unsure_until - time.monotonic())))
            continue
        if refusal.http_status == 404:
            report(f"{name} is already gone")
            return
        state = _state_or_gone(api, name)
        unsure = refusal.http_status in EXISTS_REFUSALS and time.monotonic() < unsure_until
        if state == "GONE" and unsure:
            # Believe the DELETE's refusal over the read: ask until accepted or 404.
            report(f"{name}: delete refused ({refusal}) but not visible to reads; retrying")
            time.sleep(max(0.0, min(next(unsure_delays), unsure_until - time.monotonic())))
            continue
        if state == "GONE":
            report(f"{name} is already gone")
            return
        # Someone else's delete: wait for it; if it fails, try ours again.
        if state == "DELETING":
            failed = _wait_gone(api, name, None, timing=timing, since=start, until=deadline)
            if failed is None:
                return
            refusal = failed
            state = _state_or_gone(api, name)
            if state == "GONE":
                return
        if state not in UNDELETABLE_STATES and not tried_again:
            tried_again = True
            report(f"{name}: delete refused ({refusal}), but it is {state} now: trying again")
            continue
        if state not in UNDELETABLE_STATES:
            raise Exception(
                f"{name} could not be deleted: {refusal} (it is {state}). It may still bill. "
                "Fix: delete it with `gcloud alpha compute tpus queued-resources delete "
                "... --force`, or run `pulumi destroy` again."
            ) from None
        tried_again = False
        if time.monotonic() + delay > deadline:
            raise Exception(
                f"{name} could not be deleted within {timing.delete_timeout_seconds:.0f} s: "
                f"{refusal}; it is still {state}. A queued resource cannot be deleted while it "
                "is PROVISIONING, and it bills meanwhile. Fix: run "
                "`pulumi destroy` (or `pulumi up`) again in a few minutes."
            ) from None
        report(f"{name} is {state}, not deletable yet ({refusal}); retrying in {delay:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 120.0)


def _wait_gone(
    api: TpuApi,
    name: str,
    operation: Any,
    *,
    timing: Timing,
    since: float,
    until: float,
    unsure_until: float = 0.0,
) -> ApiError | None:
    """None once gone; the refusal if the delete's Operation ends with an `error` or (without
    one: another client's delete) the node leaves DELETING for anything but gone."""
    last = ""
    watching_other = operation is None
    last_deleting = False
    delays = poll_delays(timing.poll_seconds)
    while True:
        operation = _follow(operation)
        if isinstance(operation, Mapping) and operation.get("error"):
            return ApiError.from_status(operation["error"])
        state = _state_or_gone(api, name)
        if state == "GONE" and operation is not None and time.monotonic() < unsure_until:
            # Our Operation has not ended: a 404 this soon may be "not visible yet"; it decides.
            time.sleep(next(delays))
            operation = _read_operation(api, operation)
            continue
        if state == "GONE":
            report(f"{name} deleted after {time.monotonic() - since:.0f} s")
            return None
        if state != last:
            report(f"{name}: {state} (deleting)")
            last = state
        if watching_other and last_deleting and state != "DELETING":
            return ApiError(409, "FAILED_PRECONDITION", f"another delete ended with it {state}")
        last_deleting = last_deleting or state == "DELETING"
        if time.monotonic() > until:
            raise Exception(
                f"{name} is still {state} {timing.delete_timeout_seconds:.0f} s after the "
                "delete request. Fix: check it with `gcloud alpha compute tpus queued-resources "
                "list` and run `pulumi destroy` again."
            )
        time.sleep(next(delays))
        if isinstance(operation, Mapping) and not operation.get("done"):
            operation = _read_operation(api, operation)


def _follow(operation: Any) -> Mapping[str, Any] | None:
    """The Operation still worth reading: None once it ended well or has no name."""
    if not isinstance(operation, Mapping) or not operation.get("name"):
        return None
    if operation.get("done") and not operation.get("error"):
        return None
    return operation


def _read_operation(api: TpuApi, operation: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Operation read again; None (follow only the state) if it can no longer be read."""
    try:
        return api.get_operation(str(operation["name"]))
    except ApiError as error:
        if error.http_status == 404:
            return None
        raise


def _state_or_gone(api: TpuApi, name: str) -> str:
    try:
        qr = api.get_queued_resource(name)
    except ApiError as error:
        if error.http_status == 404:
            return "GONE"
        raise
    return str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))


def cleanup_after_crash(api: TpuApi, name: str, timing: Timing) -> None:
    """Delete after a failed create, reporting rather than raising: the create's error wins."""
    try:
        delete_and_wait(api, name, timing, just_created=True)
    except Exception as error:  # noqa: BLE001 - the original error matters more
        report(
            f"could not delete {name} after a failed create ({error}). It may still bill: "
            f"delete it with `gcloud alpha compute tpus queued-resources delete ... --force`."
        )
