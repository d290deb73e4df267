"""Creating a queued resource: one zone after another, each attempt cleaned up if it fails.

As gcloud does (`surface/compute/tpus/queued_resources/create.yaml`): poll the Operation, then
the queued resource until ACTIVE. The `requestId` is this project's addition: gcloud sets none;
it makes the library's retry of a create a replay. docs/tpu-request.md, "The create".
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from components import renewal
from components.vm.queued_resource_delete import cleanup_after_crash, delete_and_wait
from components.vm.queued_resource_spec import (
    DEAD_STATES,
    ENDED_STATES,
    RENEWAL_SUFFIX,
    REQUEST_LABEL,
    Spec,
    describe,
    node_labels,
    of_this_stack,
)
from components.vm.tpu_api import ApiError, TpuApi, poll_delays, report

#: Clock skew allowed when telling, without labels, whether this create made a queued resource;
#: the TPU being renewed is hours older.
ADOPT_CLOCK_SKEW_SECONDS = 300.0
#: INVALID_ARGUMENT texts that mean "not in this zone" (seed 000's `FLEX_START provisioning model
#: is not supported for accelerator type "v5litepod-1"`); an unsupported runtime is a bad body.
UNSUPPORTED_HERE = re.compile(
    r"(provisioning model|accelerator type)\b[^.;]*?\b(not supported|not available|unavailable"
    r"|unsupported|not offered)"
    r"|\b(unsupported|unavailable) (provisioning model|accelerator type)",
    re.IGNORECASE,
)
#: In words ("Service account X does not exist."), not a field path (`service_account.scope`).
SERVICE_ACCOUNT_WORDS = re.compile(r"\bservice account\b", re.IGNORECASE)


class ZoneFailedError(Exception):
    """This zone cannot provide the TPU now; the next zone may."""


class _RefusedError(Exception):
    """The API refused this attempt (HTTP error, operation error or FAILED queued resource)."""

    def __init__(self, error: ApiError, *, failed: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.failed = failed

    @property
    def reason(self) -> str:
        if self.failed:
            return f"FAILED ({self.error.status}): {self.error.message}"
        return str(self.error)


class _TakenError(Exception):
    """The queued-resource id is in use: by the TPU this one renews, or by something else."""


Verdict = Literal["iam", "zone", "stop"]


def _verdict(refusal: _RefusedError, spec: Spec) -> Verdict:
    """`iam`: retry this zone; `zone`: try the next; `stop`: another zone would refuse it too.
    docs/tpu-request.md, "Zones, and how a refusal is judged"."""
    error = refusal.error
    email = (spec.service_account_email or "").lower()
    if (email and email in error.message.lower()) or SERVICE_ACCOUNT_WORDS.search(error.message):
        return "iam"
    if refusal.failed or error.status == "RESOURCE_EXHAUSTED":
        return "zone"
    if error.status == "INVALID_ARGUMENT" and UNSUPPORTED_HERE.search(error.message):
        return "zone"
    return "stop"


def _stop_message(zone: str, error: ApiError) -> str:
    if error.status == "INVALID_ARGUMENT":
        return (
            f"the TPU API rejected the queued-resource request in {zone} as invalid (field: "
            f"{error.field_names}): {error.message}. This is not a capacity problem, so no other "
            "zone was tried. Fix: correct the tpu-vllm:tpu setting behind that field (or report "
            "a bug if the program built it wrong), then run `pulumi up` again."
        )
    return (
        f"the TPU API refused the queued-resource request in {zone}: {error}. This is not a "
        "capacity problem, so no other zone was tried. Fix: act on the message above (for "
        "PERMISSION_DENIED: the deployer needs roles/tpu.admin and the TPU API enabled), then "
        "run `pulumi up` again."
    )


def try_zone(api: TpuApi, spec: Spec, zone: str, zone_errors: list[str]) -> dict[str, Any] | None:
    """Request the TPU in one zone and wait for ACTIVE; None (and a reason) if it cannot be had.
    Any failure deletes it again: Pulumi records nothing for a failed dynamic create."""
    iam_since: float | None = None
    iam_delays = poll_delays(max(spec.timing.poll_seconds, 1e-3))
    taken: set[str] = set()
    while True:
        attempt = _ZoneAttempt(api, spec, zone)
        try:
            return attempt.run()
        except _TakenError:
            taken.add(spec.slot)
            try:
                spec = _slot_beside_predecessor(api, spec, zone, taken)
            except ZoneFailedError as failure:
                reason = str(failure)
            else:
                continue
        except ZoneFailedError as failure:
            reason = str(failure)
        except _RefusedError as refusal:
            verdict = _verdict(refusal, spec)
            if verdict == "stop":
                attempt.clean_up_after_crash()
                raise Exception(_stop_message(zone, refusal.error)) from None
            if verdict == "iam":
                now = time.monotonic()
                iam_since = now if iam_since is None else iam_since
                waited = now - iam_since
                if waited >= spec.timing.iam_wait_seconds:
                    attempt.clean_up_after_crash()
                    raise Exception(
                        f"the TPU API still refuses the node's service account in {zone} after "
                        f"{waited:.0f} s: {refusal.reason}. A new service account can take a "
                        "minute or more to become visible. Fix: check that the account exists "
                        "and that the deployer has roles/iam.serviceAccountUser on it, then run "
                        "`pulumi up` again."
                    ) from None
                attempt.clean_up()  # the queued resource id must be free for the next try
                delay = next(iam_delays)
                report(
                    f"{zone}: the service account is not usable yet ({refusal.reason}); IAM "
                    f"changes take a while to propagate, retrying this zone in {delay:.0f} s"
                )
                time.sleep(delay)
                continue
            reason = refusal.reason
        except BaseException:
            attempt.clean_up_after_crash()
            raise
        zone_errors.append(f"{zone}: {reason}")
        report(f"{zone} cannot provide it now: {reason}; cleaning up before the next zone")
        attempt.clean_up()
        return None


def _slot_beside_predecessor(api: TpuApi, spec: Spec, zone: str, taken: set[str]) -> Spec:
    """Where to request the TPU when `spec`'s ids are taken in `zone`: beside the TPU being
    renewed, under the other id pair. Another stack's TPU sends it to the next zone; anything
    else stops the create (never adopted, deleted or stepped around)."""
    name = spec.qr_name(zone)
    try:
        occupant = api.get_queued_resource(name)
    except ApiError as error:
        if error.http_status != 404:
            raise
        raise Exception(
            f"the TPU API refused to create {name} with ALREADY_EXISTS, but there is no such "
            f"queued resource: the node id {spec.node_id} is probably held by a node left "
            f"behind. Fix: delete it (`gcloud alpha compute tpus tpu-vm delete {spec.node_id} "
            f"--zone {zone}`), then run `pulumi up` again."
        ) from None
    if not of_this_stack(api, spec, zone, occupant):
        raise ZoneFailedError(_other_stack_text(name, occupant, spec))
    state = str(occupant.get("state", {}).get("state", "STATE_UNSPECIFIED"))
    termination = describe(api, spec, zone, occupant)["termination_time"]
    renewed = renewal.in_window(state, termination, spec.lead_seconds) or state in ENDED_STATES
    successor = spec.other_slot()
    if renewed and successor.slot not in taken:
        left = renewal.seconds_left(termination)
        when = f", {renewal.minutes(left)} left" if state == "ACTIVE" and left else ""
        report(
            f"{name} is the TPU being renewed ({state}{when}); requesting its successor "
            f"beside it as {successor.qr_name(zone)} (node {successor.node_id})"
        )
        return successor
    raise Exception(
        f"{name} already exists, probably left by an interrupted run (it is {state}). Fix: "
        f"delete it (`gcloud alpha compute tpus queued-resources delete {spec.qr_id} --zone {zone} "
        "--force`) or import it, then run `pulumi up` again."
    )


def _other_stack_text(name: str, qr: Mapping[str, Any], spec: Spec) -> str:
    node = (qr.get("tpu", {}).get("nodeSpec") or [{}])[0]
    owner = dict((node.get("node") or {}).get("labels") or {}).get("stack", "none")
    return (
        f"{name} is not this stack's TPU: its node is {node.get('nodeId')} (label stack="
        f"{owner}), this stack's would be {spec.node_id} (stack={spec.labels.get('stack')}). "
        f"Two stacks whose names differ by {RENEWAL_SUFFIX!r} (foo, foo{RENEWAL_SUFFIX}) share "
        f"the queued-resource id {spec.qr_id}, one's renewal id being the other's own; it is "
        f"left alone. Fix: rename one of the stacks so that neither is the other's name plus "
        f"{RENEWAL_SUFFIX!r}, or give them different tpu.zones"
    )


class _ZoneAttempt:
    """One create in one zone; every retry of it carries the same `requestId`."""

    def __init__(self, api: TpuApi, spec: Spec, zone: str) -> None:
        self.api = api
        self.spec = spec
        self.zone = zone
        self.name = spec.qr_name(zone)
        self.request_id = str(uuid.uuid4())
        self.maybe_created = False
        self.adopted = False
        self.accepted_at = 0.0
        self.sent_at = 0.0

    def run(self) -> dict[str, Any]:
        operation = self._create()
        if operation is not None:
            self._wait_operation(operation)
        qr = self._wait_active()
        return describe(self.api, self.spec, self.zone, qr)

    def _deadline(self) -> float:
        timing = self.spec.timing
        return (
            self.accepted_at + self.spec.capacity_wait_seconds + timing.provisioning_timeout_seconds
        )

    def _create(self) -> dict[str, Any] | None:
        spec, name = self.spec, self.name
        report(f"requesting {spec.accelerator_type} ({spec.provisioning}) in {self.zone} as {name}")
        self.maybe_created = True  # from here on the request may have reached the API
        self.sent_at = time.time()
        try:
            operation = self.api.create_queued_resource(
                f"projects/{spec.project}/locations/{self.zone}",
                spec.qr_id,
                spec.body(self.zone, self.request_id),
                self.request_id,
            )
        except ApiError as error:
            if error.status == "ALREADY_EXISTS" and error.attempts > 1:
                # An earlier send of this request may have created it (answer lost): it bills,
                # so adopt it, unless `_check_adopted` finds the ids were taken all along.
                report(f"{name} was created by an earlier attempt of this request; adopting it")
                self.adopted = True
                self.accepted_at = time.monotonic()
                return None
            if error.attempts == 1 and error.http_status < 500:
                self.maybe_created = False  # one definite refusal: nothing was created
            if error.status == "ALREADY_EXISTS":
                raise _TakenError(name) from None
            raise _RefusedError(error) from None
        self.accepted_at = time.monotonic()
        return operation

    def _wait_operation(self, operation: Mapping[str, Any]) -> None:
        delays = poll_delays(self.spec.timing.poll_seconds)
        while not operation.get("done"):
            if time.monotonic() >= self._deadline():
                raise ZoneFailedError(f"the create operation {operation.get('name')} never ended")
            time.sleep(next(delays))
            operation = self.api.get_operation(str(operation["name"]))
        if operation.get("error"):
            raise _RefusedError(ApiError.from_status(operation["error"]))

    def _wait_active(self) -> dict[str, Any]:
        name, timing = self.name, self.spec.timing
        last = ""
        delays = poll_delays(timing.poll_seconds)
        while True:
            elapsed = time.monotonic() - self.accepted_at
            try:
                qr = self.api.get_queued_resource(name)
            except ApiError as error:
                if error.http_status != 404:
                    raise
                if elapsed >= timing.consistency_grace_seconds:
                    raise ZoneFailedError(
                        f"{name} is gone (404 {elapsed:.0f} s after the create was accepted)"
                    ) from None
                if last != "NOT_FOUND":
                    report(f"{name} is not visible yet (404 after {elapsed:.0f} s); waiting")
                    last = "NOT_FOUND"
                time.sleep(next(delays))
                continue
            if self.adopted:
                self._check_adopted(qr)
            state = str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))
            if state != last:
                report(f"{name}: {state} after {elapsed:.0f} s")
                last = state
            if state == "ACTIVE":
                return qr
            if state == "FAILED":
                failure = qr.get("state", {}).get("failedData", {}).get("error") or {}
                raise _RefusedError(ApiError.from_status(failure), failed=True)
            if state in DEAD_STATES:
                raise ZoneFailedError(f"went to {state} before it was ACTIVE")
            if time.monotonic() >= self._deadline():
                raise ZoneFailedError(
                    f"not ACTIVE after {elapsed:.0f} s (still {state}): the capacity wait expired"
                )
            time.sleep(next(delays))

    def _check_adopted(self, qr: Mapping[str, Any]) -> None:
        """Keep an adopted queued resource only if this request made it (same node spec, this
        request's label); the TPU being renewed has the same spec and must not be taken."""
        self.adopted = False
        wanted = self.spec.body(self.zone)["tpu"]["nodeSpec"][0]
        found = (qr.get("tpu", {}).get("nodeSpec") or [{}])[0]
        keys = ("acceleratorType", "runtimeVersion")
        same_spec = found.get("nodeId") == wanted["nodeId"] and all(
            found.get("node", {}).get(k) == wanted["node"][k] for k in keys
        )
        if same_spec and self._made_here(qr):
            return
        self.maybe_created = False  # not ours: never delete it
        report(
            f"{self.name} was there before this request (its node does not carry "
            f"{REQUEST_LABEL}={self.request_id}): the first send failed and the retry met its "
            "ids taken; not adopting it"
        )
        raise _TakenError(self.name)

    def _made_here(self, qr: Mapping[str, Any]) -> bool:
        """By the request's label; without labels, by a createTime after the first send."""
        labels = node_labels(self.api, self.spec, self.zone, qr)
        if labels is not None:
            return labels.get(REQUEST_LABEL) == self.request_id
        created_after_send = renewal.seconds_left(qr.get("createTime"), now=self.sent_at)
        return created_after_send is None or created_after_send >= -ADOPT_CLOCK_SKEW_SECONDS

    def clean_up(self) -> None:
        if self.maybe_created:
            delete_and_wait(self.api, self.name, self.spec.timing, just_created=True)

    def clean_up_after_crash(self) -> None:
        if self.maybe_created:
            cleanup_after_crash(self.api, self.name, self.spec.timing)
