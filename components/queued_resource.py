"""The flex-start queued resource, as a Pulumi dynamic provider over the TPU v2alpha1 API.

No Pulumi or Terraform provider can ask for flex-start: pulumi-gcp's `V2QueuedResource` has no
provisioning model, run duration, metadata, service account, labels or tags. This provider sends
the v2alpha1 body itself, waits for ACTIVE, fails over between zones, and on refresh tells an
expired flex-start TPU (SUSPENDED, node deleted) from a live one, so `pulumi up --refresh`
replaces it.

The create follows what gcloud does (`surface/compute/tpus/queued_resources/create.yaml`: the
call answers a long-running Operation and gcloud waits on it unless `--async`): it sends a
`requestId`, polls `operations.get` until `done`, then polls the queued resource until ACTIVE.
A refusal is classified the same way whether it came as an HTTP error, as the operation's
`error` or as a FAILED queued resource: see `_verdict`.

Renewal ahead of the end (`renewal.lead`, components/renewal.py): when the state shows the TPU
ACTIVE with less than the lead left, `diff` asks for a replacement that is not
delete-before-replace, so Pulumi creates the next queued resource first, moves every dependant
(host key, remote commands, DNS record) to it, and deletes this one at the end of the update
(pulumi/pulumi `pkg/resource/deploy/step_generator.go`: the create-replacement step now, "the
delete step is generated 'later' on, after all creates/updates finish"). Both must exist at
once, so each request has one of two id pairs, the stack's own ids or the same with
`RENEWAL_SUFFIX`; the inputs always carry the stack's own, so the diff is still "no change"
outside the window. The create takes the stack's ids unless the API says they are taken by the
node being renewed, then the other pair; when the zone beside it has no capacity, the next zone
is tried under the stack's own ids, so a successor may hold either pair in any of the stack's
zones. The resource's id and outputs name the pair and zone in use. The delete of a replaced
node that still serves while a successor does waits `renewal.drain` first, so clients that
cached the old address finish.

Which TPU is whose is read from the node's labels, never from its ids alone: the stack's labels
(`components/tpu.py` `labels`) tell this stack's nodes from those of a stack whose own name ends
in `RENEWAL_SUFFIX` (stacks `foo` and `foo-b` share the id `tpu-vllm-foo-b`), and a per-request
label (`REQUEST_LABEL`, the create's `requestId`) tells the node a create made from one that
already held its ids: a retried create whose first send failed (503) meets the TPU being renewed
with ALREADY_EXISTS too, and must not adopt it.

Pulumi pickles the provider object with dill and re-imports this module in its provider host,
so the module holds no clients and no config: everything arrives in the resource's props, and
the API client is built inside each method.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi.dynamic as dyn

from components import renewal
from components.tpu_api import ApiError, TpuApi, poll_delays, report

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PROVISIONING_MODELS = {"flex-start": "FLEX_START", "spot": "SPOT", "on-demand": "STANDARD"}
#: States in which the TPU is gone or going and must be requested again.
DEAD_STATES = frozenset({"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"})
#: States in which a delete may be refused for a while (seed 000 §1.2 names no error code).
UNDELETABLE_STATES = frozenset({"PROVISIONING", "CREATING"})
#: States of a predecessor whose ids a renewal may step around: its run ended (or is ending)
#: between the diff that chose create-before-replace and the create.
ENDED_STATES = frozenset({"SUSPENDING", "SUSPENDED", "FAILED"})
#: The second id pair (queued resource and node): a renewal's request exists beside the current
#: one, whose ids it cannot reuse. "" is the stack's own pair, so a stack's first node keeps the
#: names it always had.
RENEWAL_SUFFIX = "-b"
SLOTS = ("", RENEWAL_SUFFIX)
#: The node label that names the create (its `requestId`, a UUID: 36 characters of [0-9a-f-],
#: a valid label value, which must match [a-z0-9_-]{0,63}) that made the node. Node.labels is
#: a plain string map in the v2alpha1 discovery document (revision 20261001).
REQUEST_LABEL = "tpu-vllm-request"
#: How much earlier than this create's first send a queued resource may have been created and
#: still be this create's, when its labels cannot be read (clocks of client and API differ).
#: The TPU being renewed is older by a run minus the lead: hours, or at least half a run.
ADOPT_CLOCK_SKEW_SECONDS = 300.0
#: Longest pause between two progress lines (and state reads) while a replaced node drains.
DRAIN_REPORT_SECONDS = 30.0
#: INVALID_ARGUMENT texts that mean "not in this zone", like seed 000's `FLEX_START provisioning
#: model is not supported for accelerator type "v5litepod-1"`. The subject must be the
#: accelerator or the provisioning model: `Runtime version "x" is not supported for accelerator
#: type "y"` is a bad body, not a zone's refusal.
UNSUPPORTED_HERE = re.compile(
    r"(provisioning model|accelerator type)\b[^.;]*?\b(not supported|not available|unavailable"
    r"|unsupported|not offered)"
    r"|\b(unsupported|unavailable) (provisioning model|accelerator type)",
    re.IGNORECASE,
)
#: An error that names the service account, in words ("Service account X does not exist."),
#: not a field path such as `service_account.scope`.
SERVICE_ACCOUNT_WORDS = re.compile(r"\bservice account\b", re.IGNORECASE)

# Props whose change requires a new queued resource: the API has no update.
SPEC_KEYS = (
    "project",
    "qr_id",
    "node_id",
    "accelerator_type",
    "runtime_version",
    "provisioning",
    "max_run_seconds",
    "capacity_wait_seconds",
    "service_account_email",
    "labels",
    "tags",
    "network",
    "metadata",
)
OUTPUT_KEYS = (
    "qr_name",
    "node_name",
    "zone",
    "state",
    "external_ip",
    "internal_ip",
    "create_time",
    "termination_time",
    "zone_errors",
)


@dataclass(frozen=True)
class Timing:
    """How long to wait and how often to ask. Changing these never replaces the TPU."""

    poll_seconds: float = 15.0
    #: Beyond the capacity wait: PROVISIONING to ACTIVE takes minutes.
    provisioning_timeout_seconds: float = 1200.0
    delete_timeout_seconds: float = 1800.0
    #: Attempts per API call; google-api-python-client retries 429/5xx in between.
    retry_attempts: int = 6
    #: Scales the library's backoff (rand() x 2^n s); 2.0 keeps it as the library has it.
    retry_base_seconds: float = 2.0
    #: How long a create that names the service account is retried in the same zone: a new
    #: service account can stay invisible to the TPU API for a minute or more.
    iam_wait_seconds: float = 300.0
    #: A 404 on the new queued resource this soon after the create is eventual consistency.
    consistency_grace_seconds: float = 60.0

    @classmethod
    def from_props(cls, raw: Any) -> Timing:
        values = dict(raw or {})
        known = {k: values[k] for k in cls.__dataclass_fields__ if k in values}
        if "retry_attempts" in known:
            known["retry_attempts"] = int(known["retry_attempts"])
        return cls(**known)


@dataclass(frozen=True)
class Spec:
    """The props, typed. Numbers cross the engine as floats; they are made ints here."""

    project: str
    zones: tuple[str, ...]
    qr_id: str
    node_id: str
    accelerator_type: str
    runtime_version: str
    provisioning: str
    max_run_seconds: int | None
    capacity_wait_seconds: int
    #: None only when driven without one (tests, mocks): the node then gets the default.
    service_account_email: str | None
    labels: Mapping[str, str]
    tags: tuple[str, ...]
    metadata: Mapping[str, str]
    timing: Timing
    #: The VPC network (`access.network`); the API's own default is `default` too.
    network: str = "default"
    #: `renewal.lead`: an ACTIVE TPU with less left than this is replaced create-first. None:
    #: never (spot, on-demand, or a state written before the key existed).
    lead_seconds: float | None = None
    #: `renewal.drain`: how long a replaced TPU serves on once its successor took the name.
    drain_seconds: float = float(renewal.DEFAULT_DRAIN_SECONDS)
    #: Which id pair this request uses: "" (the stack's own) or RENEWAL_SUFFIX.
    slot: str = ""

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> Spec:
        max_run = props.get("max_run_seconds")
        lead = props.get("renewal_lead_seconds")
        drain = props.get("drain_seconds")
        return cls(
            project=str(props["project"]),
            zones=tuple(str(z) for z in props["zones"]),
            qr_id=str(props["qr_id"]),
            node_id=str(props["node_id"]),
            accelerator_type=str(props["accelerator_type"]),
            runtime_version=str(props["runtime_version"]),
            provisioning=str(props["provisioning"]),
            max_run_seconds=int(max_run) if max_run is not None else None,
            capacity_wait_seconds=int(props["capacity_wait_seconds"]),
            service_account_email=props.get("service_account_email") or None,
            labels={str(k): str(v) for k, v in dict(props.get("labels") or {}).items()},
            tags=tuple(str(t) for t in props.get("tags") or ()),
            metadata={str(k): str(v) for k, v in dict(props.get("metadata") or {}).items()},
            timing=Timing.from_props(props.get("timing")),
            network=str(props.get("network") or "default"),
            lead_seconds=float(lead) if lead else None,
            drain_seconds=float(renewal.DEFAULT_DRAIN_SECONDS if drain is None else drain),
        )

    def in_slot(self, slot: str) -> Spec:
        """This request under the ids of `slot` (one of SLOTS)."""
        qr_id = self.qr_id.removesuffix(self.slot) if self.slot else self.qr_id
        node_id = self.node_id.removesuffix(self.slot) if self.slot else self.node_id
        return dataclasses.replace(self, qr_id=qr_id + slot, node_id=node_id + slot, slot=slot)

    def other_slot(self) -> Spec:
        """The other id pair: where the successor of this request goes."""
        return self.in_slot(RENEWAL_SUFFIX if self.slot == "" else "")

    def for_name(self, qr_name: str) -> Spec:
        """The request whose ids made `qr_name`, in whichever slot; the props' own otherwise."""
        qr_id = qr_name.rsplit("/", 1)[-1]
        for slot in SLOTS:
            candidate = self.in_slot(slot)
            if candidate.qr_id == qr_id:
                return candidate
        return self

    def qr_name(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}/queuedResources/{self.qr_id}"

    def node_name(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}/nodes/{self.node_id}"

    def body(self, zone: str, request_id: str | None = None) -> dict[str, Any]:
        """The QueuedResource body, in the v2alpha1 discovery document's shape exactly. With
        `request_id`, the node is labelled with it (REQUEST_LABEL): the create that made it."""
        node: dict[str, Any] = {
            "acceleratorType": self.accelerator_type,
            "runtimeVersion": self.runtime_version,
            # The proto default is false; without it the node has no external IP at all.
            "networkConfig": {"network": self.network, "enableExternalIps": True},
            "serviceAccount": {
                **({"email": self.service_account_email} if self.service_account_email else {}),
                "scope": [CLOUD_PLATFORM_SCOPE],
            },
            "labels": {**self.labels, **({REQUEST_LABEL: request_id} if request_id else {})},
            "tags": list(self.tags),
            "metadata": dict(self.metadata),
        }
        body: dict[str, Any] = {
            "tpu": {
                "nodeSpec": [
                    {
                        "parent": f"projects/{self.project}/locations/{zone}",
                        "nodeId": self.node_id,
                        "node": node,
                    }
                ]
            },
            "provisioningModel": PROVISIONING_MODELS[self.provisioning],
            # Without a deadline a capacity wait can last forever; with it the request fails
            # and the next zone is tried.
            "queueingPolicy": {"validUntilDuration": f"{self.capacity_wait_seconds}s"},
        }
        if self.provisioning == "flex-start":
            assert self.max_run_seconds is not None
            body["runDuration"] = {"maxRunDuration": f"{self.max_run_seconds}s"}
        elif self.provisioning == "spot":
            body["spot"] = {}
        return body


class QueuedResourceProvider(dyn.ResourceProvider):
    """create / read / diff / update / delete for one flex-start queued resource."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = []
        optional = ("labels", "tags", "network", "metadata", "max_run_seconds")
        # `renewal_lead_seconds` and `drain_seconds` are optional too: a state written before
        # they existed has neither, and then the TPU is only replaced once its run ended.
        for key in (*SPEC_KEYS, "zones"):
            if key not in news and key not in optional:
                failures.append(dyn.CheckFailure(key, f"{key} is required"))
        if news.get("provisioning") not in PROVISIONING_MODELS:
            failures.append(dyn.CheckFailure("provisioning", "flex-start, spot or on-demand"))
        elif news["provisioning"] == "flex-start" and not news.get("max_run_seconds"):
            failures.append(dyn.CheckFailure("max_run_seconds", "flex-start needs a run limit"))
        if not news.get("zones"):
            failures.append(dyn.CheckFailure("zones", "at least one zone is required"))
        return dyn.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = Spec.from_props(props)
        api = _api(spec.timing)
        zone_errors: list[str] = []
        for zone in spec.zones:
            outs = _try_zone(api, spec, zone, zone_errors)
            if outs is not None:
                outs["zone_errors"] = zone_errors
                # The name of the id pair the request got (the stack's own, or beside the TPU
                # it renews), as `_describe` reports it.
                return dyn.CreateResult(id_=outs["qr_name"], outs={**_inputs(props), **outs})
        raise Exception(
            f"no zone could provide {spec.accelerator_type} ({spec.provisioning}); every "
            "queued resource that was requested has been deleted again:\n  "
            + "\n  ".join(zone_errors)
            + "\nFix: add zones to tpu-vllm:tpu.zones, raise tpu-vllm:tpu.capacityWait, or "
            "check TPU quota for this provisioning model."
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        spec = Spec.from_props(props).for_name(id_)
        api = _api(spec.timing)
        try:
            qr = api.get_queued_resource(id_)
        except ApiError as error:
            if error.http_status == 404:
                report(f"{id_} is gone (404): it will be requested again on the next up")
                return dyn.ReadResult(id_="", outs={})
            raise
        zone = id_.split("/locations/", 1)[1].split("/", 1)[0]
        outs = _describe(api, spec, zone, qr)
        if outs["state"] in ("SUSPENDED", "SUSPENDING"):
            report(
                f"{id_} is {outs['state']}: its flex-start run ended and the node was deleted; "
                "`pulumi up` replaces it"
            )
        elif renewal.in_window(outs["state"], outs["termination_time"], spec.lead_seconds):
            text = _window_text(outs["termination_time"], spec.lead_seconds, spec.drain_seconds)
            report(f"{id_}: {text}")
        return dyn.ReadResult(id_=id_, outs={**_inputs(props), **outs})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        """Only a spec change (or a dead TPU) is a change. The provider host never declares
        preview support, so an update would preview with unknown outputs and show the host key
        and every remote command as changing, which `up` would not do. A zone list that still
        holds the current zone, timing and the renewal settings are read at the next create;
        they change nothing.

        Inside the renewal window (ACTIVE, less than `renewal_lead_seconds` left) and with
        nothing else changed, the TPU is replaced create-first: the next one is requested while
        this one serves on. A spec change or an ended TPU is replaced delete-first as always:
        the old one cannot serve the new spec, or serves nothing any more."""
        replaces = [k for k in SPEC_KEYS if _norm(olds.get(k)) != _norm(news.get(k))]
        new_zones = [str(z) for z in news.get("zones") or ()]
        old_zone = olds.get("zone")
        if old_zone and old_zone not in new_zones:
            replaces.append("zones")  # its zone was dropped from the list
        if olds.get("state") in DEAD_STATES:
            replaces.append("state")
        lead = news.get("renewal_lead_seconds")
        termination = olds.get("termination_time")
        if not replaces and renewal.in_window(olds.get("state"), termination, lead):
            drain = news.get("drain_seconds")
            text = _window_text(
                termination, lead, renewal.DEFAULT_DRAIN_SECONDS if drain is None else drain
            )
            report(f"{olds.get('qr_name') or id_}: {text}")
            return dyn.DiffResult(
                changes=True,
                replaces=["termination_time"],
                stables=[],
                delete_before_replace=False,
            )
        return dyn.DiffResult(
            changes=bool(replaces),
            replaces=replaces,
            stables=[] if replaces else list(OUTPUT_KEYS),
            delete_before_replace=True,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # `diff` reports no change unless it replaces, so this is not reached; kept harmless.
        outs = {k: olds.get(k) for k in OUTPUT_KEYS}
        return dyn.UpdateResult(outs={**_inputs(news), **outs})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        spec = Spec.from_props(props).for_name(id_)
        api = _api(spec.timing)
        _drain_if_succeeded(api, spec, id_)
        _delete_and_wait(api, id_, spec.timing)


def _api(timing: Timing) -> TpuApi:
    return TpuApi(
        retry_attempts=timing.retry_attempts, retry_base_seconds=timing.retry_base_seconds
    )


def _inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k != "__provider" and k not in OUTPUT_KEYS}


def _norm(value: Any) -> Any:
    """Props cross the engine as protobuf Structs: 4 arrives as 4.0. Compare by value."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return int(value) if float(value).is_integer() else float(value)
    if isinstance(value, Mapping):
        return {str(k): _norm(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_norm(v) for v in value]
    return value


def _window_text(termination_time: str | None, lead: Any, drain: Any) -> str:
    """What a renewal inside the window does, for the progress lines of read/diff. `lead` and
    `drain` are seconds as props carry them (floats)."""
    left = renewal.seconds_left(termination_time) or 0.0
    return (
        f"ACTIVE with {renewal.minutes(left)} of its run left, inside the renewal window "
        f"(renewal.lead {renewal.minutes(float(lead or 0))}): `pulumi up` requests the next "
        "TPU beside it (create before delete), moves the server and the DNS name to it once it "
        f"serves, then deletes this one after a drain of {renewal.minutes(float(drain or 0))}"
    )


class ZoneFailedError(Exception):
    """This zone cannot provide the TPU now; the next zone may."""


class _RefusedError(Exception):
    """The API refused this attempt (HTTP error, operation error or FAILED queued resource)."""

    def __init__(self, error: ApiError, *, failed: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        #: A FAILED queued resource: "not here" unless it names the service account.
        self.failed = failed

    @property
    def reason(self) -> str:
        if self.failed:
            return f"FAILED ({self.error.status}): {self.error.message}"
        return str(self.error)


class _TakenError(Exception):
    """The queued-resource id is in use (a definite ALREADY_EXISTS): by the TPU this one
    renews, or by something the program did not make."""


Verdict = Literal["iam", "zone", "stop"]


def _verdict(refusal: _RefusedError, spec: Spec) -> Verdict:
    """What a refusal means. `iam`: the service account is not visible yet, retry this zone.
    `zone`: not here (quota, capacity, a FAILED request, a zone that does not offer the
    accelerator or provisioning model), try the next zone. `stop`: anything else, such as a bad
    body; another zone would refuse it too."""
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


def _try_zone(api: TpuApi, spec: Spec, zone: str, zone_errors: list[str]) -> dict[str, Any] | None:
    """Request the TPU in one zone and wait for ACTIVE; None (and a reason) if it cannot be had.

    Whatever goes wrong after the create may have gone out, the queued resource is deleted
    again: Pulumi records nothing for a failed dynamic create, so it would bill unseen."""
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
    renewed (this stack's, by its labels; ACTIVE inside its window, or ended since the diff),
    under the other id pair. Another stack's TPU under these ids (stacks `foo` and `foo-b`)
    sends the request to the next zone (ZoneFailedError). Anything else holding the ids stops
    the create, as a queued resource left by an interrupted run always did: it is not adopted,
    not deleted and not silently stepped around."""
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
    if not _of_this_stack(api, spec, zone, occupant):
        raise ZoneFailedError(_other_stack_text(name, occupant, spec))
    state = str(occupant.get("state", {}).get("state", "STATE_UNSPECIFIED"))
    termination = _describe(api, spec, zone, occupant)["termination_time"]
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


class _ZoneAttempt:
    """One create in one zone. Its `requestId` (the API's idempotency UUID) is fixed here, so
    every retry of this create, which the library sends to the same URI, carries the same one."""

    def __init__(self, api: TpuApi, spec: Spec, zone: str) -> None:
        self.api = api
        self.spec = spec
        self.zone = zone
        self.name = spec.qr_name(zone)
        self.request_id = str(uuid.uuid4())
        #: The create may have taken effect, so cleanup must delete (404 counts as done).
        self.maybe_created = False
        self.adopted = False
        self.accepted_at = 0.0
        #: Wall-clock time of the first send, for `_made_here` when no label can be read.
        self.sent_at = 0.0

    def run(self) -> dict[str, Any]:
        operation = self._create()
        if operation is not None:
            self._wait_operation(operation)
        qr = self._wait_active()
        return _describe(self.api, self.spec, self.zone, qr)

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
                # An earlier send of this very request (same requestId) may have created it and
                # its answer was lost; the retry met it. Adopt it: it bills, it must not be
                # orphaned. Or the first send failed and the ids were taken all along (the TPU
                # being renewed): `_check_adopted` tells the two apart by the node's labels.
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
        """Poll `operations.get` until `done`; an operation `error` is a refusal like any."""
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
        """An adopted queued resource must be the one this request made: the same node spec,
        and a node labelled with this request's id. One that held the ids before (the TPU
        being renewed has the same spec) is not adopted and never deleted: the ids are taken,
        as a 409 on the first send would have said (`_TakenError`), and
        `_slot_beside_predecessor` decides where the request goes, or stops it."""
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
        """Whether this request created `qr`: its node carries the request's label. When no
        labels can be read, whether it was created after the first send (less clock skew)."""
        labels = _node_labels(self.api, self.spec, self.zone, qr)
        if labels is not None:
            return labels.get(REQUEST_LABEL) == self.request_id
        # createTime minus the first send; None when the API gave no createTime.
        created_after_send = renewal.seconds_left(qr.get("createTime"), now=self.sent_at)
        return created_after_send is None or created_after_send >= -ADOPT_CLOCK_SKEW_SECONDS

    def clean_up(self) -> None:
        """Delete what this attempt may have created and wait until it is gone."""
        if self.maybe_created:
            _delete_and_wait(self.api, self.name, self.spec.timing)

    def clean_up_after_crash(self) -> None:
        if self.maybe_created:
            _cleanup_after_crash(self.api, self.name, self.spec.timing)


def _describe(api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]) -> dict[str, Any]:
    """The resource's outputs: state, IPs, times. The node exists only while ACTIVE."""
    state = str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))
    external_ip = internal_ip = None
    termination_time = qr.get("runDuration", {}).get("terminationTime") or None
    node_name = spec.node_name(zone)
    if state == "ACTIVE":
        try:
            node = api.get_node(node_name)
        except ApiError as error:
            if error.http_status != 404:
                raise
        else:
            endpoint = (node.get("networkEndpoints") or [{}])[0]
            internal_ip = endpoint.get("ipAddress")
            external_ip = endpoint.get("accessConfig", {}).get("externalIp")
            # Google's flex-start doc tells users to read the end time here; the queued
            # resource's runDuration.terminationTime may be empty.
            termination_time = termination_time or (
                node.get("schedulingConfig", {}).get("terminationTimestamp") or None
            )
    return {
        "qr_name": spec.qr_name(zone),
        "node_name": node_name,
        "zone": zone,
        "state": state,
        "external_ip": external_ip,
        "internal_ip": internal_ip,
        "create_time": qr.get("createTime"),
        "termination_time": termination_time,
    }


def _drain_if_succeeded(api: TpuApi, spec: Spec, name: str) -> None:
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
    either id pair, in this TPU's zone or any of the stack's others. A successor that found no
    capacity beside its predecessor was requested in the next zone under the stack's own ids,
    which may be this TPU's own ids in another zone."""
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
            if state == "ACTIVE" and _of_this_stack(api, candidate, candidate_zone, qr):
                return other
    return None


def _node_labels(
    api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]
) -> Mapping[str, str] | None:
    """The labels of `qr`'s node: as the queued resource's node spec holds them, else from the
    node itself while it exists (ACTIVE); None when neither shows any."""
    found = (qr.get("tpu", {}).get("nodeSpec") or [{}])[0].get("node") or {}
    if "labels" in found:
        return {str(k): str(v) for k, v in dict(found["labels"] or {}).items()}
    if qr.get("state", {}).get("state") != "ACTIVE":
        return None
    try:
        node = api.get_node(spec.node_name(zone))
    except ApiError as error:
        if error.http_status == 404:
            return None
        raise
    if "labels" not in node:
        return None
    return {str(k): str(v) for k, v in dict(node["labels"] or {}).items()}


def _of_this_stack(api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]) -> bool:
    """Whether `qr`, found under `spec`'s ids, is this stack's: its node id is `spec`'s and its
    node carries every one of the stack's labels (`stack`, `project`, `managed-by`). The ids
    alone do not tell: stack `foo`'s renewal id `tpu-vllm-foo-b` is stack `foo-b`'s own. A node
    whose labels cannot be read is judged by its node id alone."""
    node_id = (qr.get("tpu", {}).get("nodeSpec") or [{}])[0].get("nodeId")
    if node_id is not None and node_id != spec.node_id:
        return False
    labels = _node_labels(api, spec, zone, qr)
    return labels is None or all(labels.get(k) == v for k, v in spec.labels.items())


def _other_stack_text(name: str, qr: Mapping[str, Any], spec: Spec) -> str:
    """Why another stack's queued resource under this request's ids sends it to the next zone."""
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


def _delete_and_wait(api: TpuApi, name: str, timing: Timing) -> None:
    """Force-delete (nodes first) and wait until it is gone; gone already counts as success.

    Seed 000 says a PROVISIONING queued resource cannot be deleted but not with which error
    code, so any refusal is retried, with backoff, while the state read back is PROVISIONING or
    CREATING; a refusal in any other state is raised."""
    start = time.monotonic()
    deadline = start + timing.delete_timeout_seconds
    delay = timing.poll_seconds
    while True:
        try:
            api.delete_queued_resource(name)
            break
        except ApiError as error:
            if error.http_status == 404:
                report(f"{name} is already gone")
                return
            state = _state_or_gone(api, name)
            if state == "GONE":
                report(f"{name} is already gone")
                return
            if state == "DELETING":
                break  # someone else's delete is under way: wait for it
            if state not in UNDELETABLE_STATES:
                raise Exception(
                    f"{name} could not be deleted: {error} (it is {state}). It may still bill. "
                    "Fix: delete it with `gcloud alpha compute tpus queued-resources delete "
                    "... --force`, or run `pulumi destroy` again."
                ) from None
            if time.monotonic() + delay > deadline:
                raise Exception(
                    f"{name} could not be deleted within {timing.delete_timeout_seconds:.0f} s: "
                    f"{error}; it is still {state}. A queued resource cannot be deleted while it "
                    "is PROVISIONING (seed 000 §1.2) and it bills meanwhile. Fix: run "
                    "`pulumi destroy` (or `pulumi up`) again in a few minutes."
                ) from None
            report(f"{name} is {state}, not deletable yet ({error}); retrying in {delay:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 120.0)
    last = ""
    delays = poll_delays(timing.poll_seconds)
    while True:
        state = _state_or_gone(api, name)
        if state == "GONE":
            report(f"{name} deleted after {time.monotonic() - start:.0f} s")
            return
        if state != last:
            report(f"{name}: {state} (deleting)")
            last = state
        if time.monotonic() > deadline:
            raise Exception(
                f"{name} is still {state} {timing.delete_timeout_seconds:.0f} s after the "
                "delete request. Fix: check it with `gcloud alpha compute tpus queued-resources "
                "list` and run `pulumi destroy` again."
            )
        time.sleep(next(delays))


def _state_or_gone(api: TpuApi, name: str) -> str:
    """The queued resource's state, or GONE on 404."""
    try:
        qr = api.get_queued_resource(name)
    except ApiError as error:
        if error.http_status == 404:
            return "GONE"
        raise
    return str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))


def _cleanup_after_crash(api: TpuApi, name: str, timing: Timing) -> None:
    """A create that fails after the request went out must not leave a billing TPU behind:
    Pulumi records nothing for a failed dynamic create, so it would never be deleted."""
    try:
        _delete_and_wait(api, name, timing)
    except Exception as error:  # noqa: BLE001 - the original error matters more
        report(
            f"could not delete {name} after a failed create ({error}). It may still bill: "
            f"delete it with `gcloud alpha compute tpus queued-resources delete ... --force`."
        )


class QueuedResource(dyn.Resource):
    """One queued resource with one node. Inputs are the `Spec` fields plus `zones`/`timing`."""

    qr_name: pulumi.Output[str]
    node_name: pulumi.Output[str]
    zone: pulumi.Output[str]
    state: pulumi.Output[str]
    external_ip: pulumi.Output[str | None]
    internal_ip: pulumi.Output[str | None]
    create_time: pulumi.Output[str | None]
    termination_time: pulumi.Output[str | None]
    zone_errors: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        props: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            QueuedResourceProvider(),
            name,
            {**props, **dict.fromkeys(OUTPUT_KEYS)},
            opts,
        )
