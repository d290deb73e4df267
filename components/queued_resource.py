"""The flex-start queued resource, as a Pulumi dynamic provider over the TPU v2alpha1 API.

No Pulumi or Terraform provider can ask for flex-start: pulumi-gcp's `V2QueuedResource` has no
provisioning model, run duration, metadata, service account, labels or tags. This provider sends
the v2alpha1 body itself, waits for ACTIVE, fails over between zones, and on refresh tells an
expired flex-start TPU (SUSPENDED, node deleted) from a live one, so `pulumi up --refresh`
replaces it.

Pulumi pickles the provider object with dill and re-imports this module in its provider host,
so the module holds no clients and no config: everything arrives in the resource's props, and
the API client is built inside each method.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.tpu_api import ApiError, TpuApi, poll_delays, report

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PROVISIONING_MODELS = {"flex-start": "FLEX_START", "spot": "SPOT", "on-demand": "STANDARD"}
#: States in which the TPU is gone or going and must be requested again.
DEAD_STATES = frozenset({"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"})
#: Create answers that mean "not in this zone": try the next one.
ZONE_REJECTIONS = frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"})

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
    retry_attempts: int = 6
    retry_base_seconds: float = 2.0

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

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> Spec:
        max_run = props.get("max_run_seconds")
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
        )

    def qr_name(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}/queuedResources/{self.qr_id}"

    def node_name(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}/nodes/{self.node_id}"

    def body(self, zone: str) -> dict[str, Any]:
        """The QueuedResource body, in the v2alpha1 discovery document's shape exactly."""
        node: dict[str, Any] = {
            "acceleratorType": self.accelerator_type,
            "runtimeVersion": self.runtime_version,
            # The proto default is false; without it the node has no external IP at all.
            "networkConfig": {"network": self.network, "enableExternalIps": True},
            "serviceAccount": {
                **({"email": self.service_account_email} if self.service_account_email else {}),
                "scope": [CLOUD_PLATFORM_SCOPE],
            },
            "labels": dict(self.labels),
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


class ZoneFailedError(Exception):
    """This zone cannot provide the TPU now; the next zone may."""


class QueuedResourceProvider(dyn.ResourceProvider):
    """create / read / diff / update / delete for one flex-start queued resource."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = []
        optional = ("labels", "tags", "network", "metadata", "max_run_seconds")
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
                return dyn.CreateResult(id_=spec.qr_name(zone), outs={**_inputs(props), **outs})
        raise Exception(
            f"no zone could provide {spec.accelerator_type} ({spec.provisioning}); every "
            "queued resource that was requested has been deleted again:\n  "
            + "\n  ".join(zone_errors)
            + "\nFix: add zones to tpu-vllm:tpu.zones, raise tpu-vllm:tpu.capacityWait, or "
            "check TPU quota for this provisioning model."
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        spec = Spec.from_props(props)
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
        return dyn.ReadResult(id_=id_, outs={**_inputs(props), **outs})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [k for k in SPEC_KEYS if _norm(olds.get(k)) != _norm(news.get(k))]
        new_zones = [str(z) for z in news.get("zones") or ()]
        old_zone = olds.get("zone")
        if _norm(olds.get("zones")) != _norm(new_zones) and old_zone not in new_zones:
            replaces.append("zones")  # still fine where it is unless its zone was dropped
        if olds.get("state") in DEAD_STATES:
            replaces.append("state")
        changed = bool(replaces) or _norm(olds.get("zones")) != _norm(new_zones)
        changed = changed or _norm(olds.get("timing")) != _norm(news.get("timing"))
        return dyn.DiffResult(
            changes=changed,
            replaces=replaces,
            stables=[] if replaces else list(OUTPUT_KEYS),
            delete_before_replace=True,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only timing or a zone list that still holds the current zone changed: nothing to send.
        outs = {k: olds.get(k) for k in OUTPUT_KEYS}
        return dyn.UpdateResult(outs={**_inputs(news), **outs})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        spec = Spec.from_props(props)
        _delete_and_wait(_api(spec.timing), id_, spec.timing)


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


def _try_zone(api: TpuApi, spec: Spec, zone: str, zone_errors: list[str]) -> dict[str, Any] | None:
    """Request the TPU in one zone and wait for ACTIVE; None (and a reason) if it cannot be had."""
    name = spec.qr_name(zone)
    report(f"requesting {spec.accelerator_type} ({spec.provisioning}) in {zone} as {name}")
    try:
        api.create_queued_resource(
            f"projects/{spec.project}/locations/{zone}", spec.qr_id, spec.body(zone)
        )
    except ApiError as error:
        if error.status == "ALREADY_EXISTS":
            raise Exception(
                f"{name} already exists, probably left by an interrupted run. Fix: delete it "
                f"(`gcloud alpha compute tpus queued-resources delete {spec.qr_id} --zone "
                f"{zone} --force`) or import it, then run `pulumi up` again."
            ) from None
        if error.status in ZONE_REJECTIONS or error.http_status == 429:
            zone_errors.append(f"{zone}: {error}")
            report(f"{zone} rejected the request: {error}")
            return None
        raise
    try:
        qr = _wait_active(api, spec, name)
        return _describe(api, spec, zone, qr)
    except ZoneFailedError as failure:
        zone_errors.append(f"{zone}: {failure}")
        report(f"{zone}: {failure}; deleting {name} before trying the next zone")
        _delete_and_wait(api, name, spec.timing)
        return None
    except BaseException:
        _cleanup_after_crash(api, name, spec.timing)
        raise


def _wait_active(api: TpuApi, spec: Spec, name: str) -> dict[str, Any]:
    start = time.monotonic()
    deadline = start + spec.capacity_wait_seconds + spec.timing.provisioning_timeout_seconds
    last = ""
    delays = poll_delays(spec.timing.poll_seconds)
    while True:
        qr = api.get_queued_resource(name)
        state = str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))
        elapsed = time.monotonic() - start
        if state != last:
            report(f"{name}: {state} after {elapsed:.0f} s")
            last = state
        if state == "ACTIVE":
            return qr
        if state == "FAILED":
            error = qr.get("state", {}).get("failedData", {}).get("error", {})
            raise ZoneFailedError(f"FAILED: {error.get('message') or 'no reason given'}")
        if state in DEAD_STATES:
            raise ZoneFailedError(f"went to {state} before it was ACTIVE")
        if time.monotonic() >= deadline:
            raise ZoneFailedError(f"not ACTIVE after {elapsed:.0f} s (still {state})")
        time.sleep(next(delays))


def _describe(api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]) -> dict[str, Any]:
    """The resource's outputs: state, IPs, times. The node exists only while ACTIVE."""
    state = str(qr.get("state", {}).get("state", "STATE_UNSPECIFIED"))
    external_ip = internal_ip = None
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
    return {
        "qr_name": spec.qr_name(zone),
        "node_name": node_name,
        "zone": zone,
        "state": state,
        "external_ip": external_ip,
        "internal_ip": internal_ip,
        "create_time": qr.get("createTime"),
        "termination_time": qr.get("runDuration", {}).get("terminationTime"),
    }


def _delete_and_wait(api: TpuApi, name: str, timing: Timing) -> None:
    """Force-delete (nodes first) and wait until it is gone; gone already counts as success."""
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
            if error.status != "FAILED_PRECONDITION":
                raise
            if time.monotonic() + delay > deadline:
                raise Exception(
                    f"{name} could not be deleted within {timing.delete_timeout_seconds:.0f} s: "
                    f"{error.message}. A queued resource cannot be deleted while it is "
                    "PROVISIONING (seed 000 §1.2) and it bills meanwhile. Fix: run "
                    "`pulumi destroy` (or `pulumi up`) again in a few minutes."
                ) from None
            report(f"{name} cannot be deleted yet ({error.message}); retrying in {delay:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 120.0)
    last = ""
    delays = poll_delays(timing.poll_seconds)
    while True:
        try:
            qr = api.get_queued_resource(name)
        except ApiError as error:
            if error.http_status == 404:
                report(f"{name} deleted after {time.monotonic() - start:.0f} s")
                return
            raise
        state = str(qr.get("state", {}).get("state", ""))
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
