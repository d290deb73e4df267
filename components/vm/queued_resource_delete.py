"""Deleting a queued resource: the drain of a replaced node that still serves, then the
force-delete, retried while the API refuses it in PROVISIONING, and waited on until it is gone.
Part of the queued-resource provider (components/vm/queued_resource.py).
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

#: Longest pause between two progress lines (and state reads) while a replaced node drains.
DRAIN_REPORT_SECONDS = 30.0


def drain_if_succeeded(api: TpuApi, spec: Spec, name: str) -> None:
    """Before deleting a TPU that still serves while its successor (the other id pair) is
    ACTIVE, wait `spec.drain_seconds`: Pulumi deletes a create-before-replace's old resource
    only after every update, so the DNS record already names the successor, and clients that
    cached the old address (up to the record's TTL) or still run a request on it finish.

    No successor (`pulumi destroy`, a delete-before-replace) or a TPU that no longer serves
    (its run ended): deleted at once. The wait ends early if the run ends meanwhile."""
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
    """Another ACTIVE queued resource of this stack (by its node's labels), or None: under
    either id pair, in this TPU's zone or any of the stack's others (`spec.zones`: the current
    config's, which an in-place update stored after any change since the create). A successor
    that found no capacity beside its predecessor was requested in the next zone under the
    stack's own ids, which may be this TPU's own ids in another zone."""
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


#: Refusals that show the API found the resource: it judged its state (FAILED_PRECONDITION).
EXISTS_REFUSALS = frozenset({400, 409})


def delete_and_wait(api: TpuApi, name: str, timing: Timing, *, just_created: bool = False) -> None:
    """Force-delete (nodes first) and wait until it is gone; gone already counts as success.

    Seed 000 says a PROVISIONING queued resource cannot be deleted but not with which error
    code, so any refusal is retried, with backoff, while the state read back is PROVISIONING or
    CREATING. The refusal and the state read after it are two requests: a node refused while
    PROVISIONING may read ACTIVE by then, when the delete would be accepted. So a refusal whose
    read-back is any other state is tried again at once, and raised only if that try is
    refused with such a state read back too.

    A precondition refusal (400 or 409: the API judged the resource's state, so it exists) is
    not undone by a 404 read right after it, within `consistency_grace_seconds` of the first
    try: a resource created a moment ago may not be visible to reads yet, and a cleanup that
    believed the read would leave a billing TPU behind. The delete is sent again until it is
    accepted or answers 404. A 403, 429 or 5xx says nothing of existence (AIP-211: a 403 comes
    whether or not the resource exists) and gets no such grace. Any 400 counts, not only
    FAILED_PRECONDITION: seed 000 does not say which code a state refusal carries, and the
    price of a grace not needed is a few retries, of one missed a billing TPU.

    `just_created`: the cleanup of this run's own create. A 404 from the DELETE itself, within
    the grace, may then only mean the new resource is not visible yet, like a read's: it is
    sent again until the grace ends.

    A refusal may also come later: `queuedResources.delete` answers a long-running Operation
    (the TPU v2alpha1 discovery document: "response": {"$ref": "Operation"}), which ends with
    `error` (a google.rpc.Status) when the delete failed. That error takes the same path as one
    the request itself got, instead of waiting out the whole timeout for a node that stays."""
    start = time.monotonic()
    deadline = start + timing.delete_timeout_seconds
    # Until when a 404 read after a refusal (or during our accepted delete) may only mean "not
    # visible yet": the project's own bound, the one the create applies to a new resource's
    # 404s; no TPU API page documents read-after-create consistency.
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
            # A precondition refusal says it exists; a read that says otherwise so soon may
            # only not see it yet (a resource just created is not at once visible to reads).
            # Believe the DELETE: ask again until it is accepted or answers 404 itself.
            report(f"{name}: delete refused ({refusal}) but not visible to reads; retrying")
            time.sleep(max(0.0, min(next(unsure_delays), unsure_until - time.monotonic())))
            continue
        if state == "GONE":
            report(f"{name} is already gone")
            return
        # Someone else's delete is under way: wait for it; if it fails (the node leaves
        # DELETING for another state), try ours again.
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
                "is PROVISIONING (seed 000 §1.2) and it bills meanwhile. Fix: run "
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
    """Wait until the queued resource is gone (None), reading its state and, while it has not
    ended, the delete's Operation (`operations.get` on its name); an Operation that ends with
    an `error` is returned as the refusal it is. Without an Operation (another client's
    delete), a node that leaves DELETING for anything but gone is that delete's failure,
    returned as a refusal too. While our Operation has not ended, a 404 read before
    `unsure_until` is not taken as gone. Past the deadline, raise."""
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
            # Our delete's Operation has not ended: a 404 this soon may only mean the resource
            # is not visible to reads yet, and the Operation may still fail. Its end decides.
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
    """The queued resource's state, or GONE on 404."""
    try:
        qr = api.get_queued_resource(name)
    except ApiError as error:
        if error.http_status == 404:
            return "GONE"
        raise
    return str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))


def cleanup_after_crash(api: TpuApi, name: str, timing: Timing) -> None:
    """A create that fails after the request went out must not leave a billing TPU behind:
    Pulumi records nothing for a failed dynamic create, so it would never be deleted."""
    try:
        delete_and_wait(api, name, timing, just_created=True)
    except Exception as error:  # noqa: BLE001 - the original error matters more
        report(
            f"could not delete {name} after a failed create ({error}). It may still bill: "
            f"delete it with `gcloud alpha compute tpus queued-resources delete ... --force`."
        )
