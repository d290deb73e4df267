"""What a queued resource is asked for (`Spec`, the v2alpha1 body) and what is read back
(`describe`, the outputs). Part of the queued-resource provider: no clients, no config."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components import renewal
from components.naming import resource_id
from components.vm.tpu_api import ApiError, TpuApi

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PROVISIONING_MODELS = {"flex-start": "FLEX_START", "spot": "SPOT", "on-demand": "STANDARD"}
#: `QueuedResourceState.state`, as in googleapiclient's tpu.v2alpha1.json (revision 20261001).
STATES = (
    "STATE_UNSPECIFIED",
    "CREATING",
    "ACCEPTED",
    "PROVISIONING",
    "FAILED",
    "DELETING",
    "ACTIVE",
    "SUSPENDING",
    "SUSPENDED",
    "WAITING_FOR_RESOURCES",
)
LIVE_STATES = frozenset({"CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"})
#: Only a deletion changes them: the run ended and the VM was deleted, or the request failed.
FINAL_STATES = frozenset({"SUSPENDED", "FAILED"})
LEAVING_STATES = frozenset({"SUSPENDING", "DELETING"})
DEAD_STATES = FINAL_STATES | LEAVING_STATES
#: A delete may be refused for a while (seed 000 §1.2, which names no error code).
UNDELETABLE_STATES = frozenset({"PROVISIONING", "CREATING"})
#: A predecessor whose run ended between the renewal's diff and its create: its ids are stepped
#: around too.
ENDED_STATES = FINAL_STATES | {"SUSPENDING"}
#: The second id pair, for a renewal's request beside the current one; "" is the stack's own.
RENEWAL_SUFFIX = "-b"
SLOTS = ("", RENEWAL_SUFFIX)
#: The node label naming the create (its `requestId` UUID, a valid label value) that made it.
REQUEST_LABEL = "tpu-vllm-request"
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
#: Props whose change is an in-place update with no TPU call: `delete` sees only stored values
#: (docs/tpu-request.md, "Progress, retries and what changes in place").
IN_PLACE_KEYS = ("zones", "timing", "renewal_lead_seconds", "drain_seconds")
IN_PLACE_CONFIG = {
    "zones": "tpu.zones",
    "timing": "timing",
    "renewal_lead_seconds": "renewal.lead",
    "drain_seconds": "renewal.drain",
}
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


def node_ids(stack: str) -> tuple[str, ...]:
    """Every node id the stack's TPU may have (either id pair), for the dashboard's TPU tiles."""
    own = resource_id(stack, "-node")
    return tuple(own + slot for slot in SLOTS)


@dataclass(frozen=True)
class Timing:
    """How long to wait and how often to ask. Changing these never replaces the TPU."""

    poll_seconds: float = 15.0
    provisioning_timeout_seconds: float = 1200.0
    delete_timeout_seconds: float = 1800.0
    retry_attempts: int = 6
    #: Scales the library's backoff (rand() x 2^n s); 2.0 keeps it as the library has it.
    retry_base_seconds: float = 2.0
    #: A new service account can stay invisible to the TPU API for a minute or more.
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
    service_account_email: str | None
    labels: Mapping[str, str]
    tags: tuple[str, ...]
    metadata: Mapping[str, str]
    timing: Timing
    network: str = "default"
    #: None: never renewed (spot, on-demand, or a state written before the key existed).
    lead_seconds: float | None = None
    drain_seconds: float = float(renewal.DEFAULT_DRAIN_SECONDS)
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
        """The QueuedResource body, in the v2alpha1 discovery document's shape."""
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
            # Without it a capacity wait can last forever, and the next zone is never tried.
            "queueingPolicy": {"validUntilDuration": f"{self.capacity_wait_seconds}s"},
        }
        if self.provisioning == "flex-start":
            assert self.max_run_seconds is not None
            body["runDuration"] = {"maxRunDuration": f"{self.max_run_seconds}s"}
        elif self.provisioning == "spot":
            body["spot"] = {}
        return body


def describe(api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]) -> dict[str, Any]:
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


def node_labels(
    api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]
) -> Mapping[str, str] | None:
    """The labels of `qr`'s node, from its node spec or the node itself; None if unreadable."""
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


def of_this_stack(api: TpuApi, spec: Spec, zone: str, qr: Mapping[str, Any]) -> bool:
    """Whether `qr`, found under `spec`'s ids, is this stack's, by node id and labels: stack
    `foo`'s renewal id `tpu-vllm-foo-b` is stack `foo-b`'s own."""
    node_id = (qr.get("tpu", {}).get("nodeSpec") or [{}])[0].get("nodeId")
    if node_id is not None and node_id != spec.node_id:
        return False
    labels = node_labels(api, spec, zone, qr)
    return labels is None or all(labels.get(k) == v for k, v in spec.labels.items())
