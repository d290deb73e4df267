"""Loopback fake of the Cloud TPU v2alpha1 API: queued resources, nodes, operations.

Why it exists: the product drives flex-start TPUs through the v2alpha1 REST API with
google-api-python-client, and nothing here may reach Google. The fake has to fail where the real
API fails, or the provider tests prove nothing. So:

* Routing is derived from the discovery document that ships with google-api-python-client
  (``googleapiclient/discovery_cache/documents/tpu.v2alpha1.json``), so the URLs the discovery
  client produces are the URLs the fake serves, and unknown query parameters are rejected.
* Every request body is validated against that document's schemas the way the real JSON->proto
  front end does: unknown field, wrong JSON type, bad enum, malformed duration/timestamp and
  proto ``oneof`` conflicts are 400 INVALID_ARGUMENT with a ``google.rpc.BadRequest`` detail.
  Then the semantic checks the TPU service applies to a queued resource run.
* The queued-resource state machine is driven by a clock, with short per-state durations, plus
  knobs per zone (rejection, quota, failure, no capacity) and injected transient faults.

Behaviour choices, where the real API is not precisely known or a test needs something:

* Output-only (``readOnly``) fields in a request are type-checked and then ignored, as the real
  API does (AIP-203); ``runDuration.terminationTime`` is also ignored on create (server computed).
* ``fieldViolations[].field`` is the camelCase JSON path of the offending field, including the
  field itself (``tpu.nodeSpec[0].node.fooBar``); the description and message use the real
  front end's wording with the proto snake_case path (``queued_resource.tpu.node_spec[0].node``).
* Like the real proto JSON parser, snake_case field names are accepted as aliases, ``null``
  means "unset", integers may be JSON numbers or decimal strings (integral floats such as ``4.0``
  are accepted unless ``strict_integers=True``) and enums may be given by number.
* Node ids follow the Compute Engine instance-name rule ``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``
  (a TPU node is a VM); labels, network tags and metadata keys follow the Compute Engine rules.
* ``acceleratorType`` must look like a real gcloud spelling (``v5litepod-1``, ``v6e-4``: so
  ``v5e-1`` is rejected) and ``runtimeVersion`` must fit the family (see ``RUNTIME_VERSIONS``).
* Deleting a queued resource that is already DELETING answers a new operation (idempotent).
* ``queuedResources.create`` answers a long-running Operation, as gcloud expects
  (``googlecloudsdk`` ``surface/compute/tpus/queued_resources/create.yaml`` waits on it unless
  ``--async``); it is ``done`` once the request is ACCEPTED, or ends with ``error`` (a
  ``google.rpc.Status``) in the ``operation_error`` zone mode, after which the queued resource
  is gone. Which refusals the real API sends this way rather than as HTTP errors is not
  documented; the fake can do both.
* ``requestId`` ("Idempotent request UUID." in the discovery document): a create that repeats
  one already seen answers 409 ALREADY_EXISTS (``replay_answer="already_exists"``, the issue's
  observation of a replayed create) or the first operation again (``"operation"``, AIP-155).
* ``fail_next(..., take_effect=True)`` lets the request change state and then answers the error,
  as when a front end times out (504) after the backend committed: the client's retry is then a
  replay.
* ``visibility_delay``: reads (get, list) of a new queued resource answer 404 for that long
  after the create (eventual consistency). Deletes see it at once, so cleanup never misses it.
* ``reject_service_account(email, seconds)``: a node service account the API cannot see yet
  (IAM propagation) is refused with ``Service account EMAIL does not exist.``, the wording
  Google APIs use for an unknown account (Compute Engine ``badRequest``, e.g.
  midl-dev/tezos-on-gke#45), as an HTTP 400 or as the operation's error.
* ``delete_refusal``/``undeletable_states``: seed 000 says a PROVISIONING queued resource cannot
  be deleted but names no error code, so the code is a knob (default 400 FAILED_PRECONDITION).
* ``delete_refusal_in_operation``: ``queuedResources.delete`` answers a long-running Operation
  (discovery document: ``"response": {"$ref": "Operation"}``); with this knob a refused delete
  is accepted instead and its Operation ends, after ``durations.deleting``, with the refusal as
  its ``error`` (a ``google.rpc.Status``), the queued resource staying as it was. Which
  refusals the real API sends this way rather than as HTTP errors is not documented; the fake
  can do both.
* When a flex-start run ends, the node is gone at once: ``nodes.get`` (and
  ``getGuestAttributes``) answer 404 NOT_FOUND while the queued resource is SUSPENDING
  (``stateInitiator: SERVICE``) and then SUSPENDED. Sources: Cloud TPU "Request Cloud TPUs using
  Flex-start" ("When the requested run duration elapses, the TPU VM is deleted and the queued
  resource moves to the SUSPENDED state") and the v2alpha1 ``QueuedResourceState.State`` enum
  (SUSPENDING: "The resources specified in the QueuedResource request are being deleted";
  SUSPENDED: "... have been deleted"). How long a deleted node stays readable as DELETING is not
  documented; the fake shows none, so code that reads a node after the run must handle 404.
  Only a user's force delete of the queued resource shows its node as DELETING until it is gone.
* ``qr_reports_termination_time=False`` leaves ``runDuration.terminationTime`` empty; the node's
  ``schedulingConfig.terminationTimestamp`` (where Google's flex-start doc says to read the end
  time) is still set.
* ``fields=`` partial responses are accepted and ignored.
* A node has a single network endpoint (single-host slices only).
* ``failedData.error`` texts (no capacity, ``validUntilDuration`` expiry) are plausible, not
  verbatim copies of production text.
"""

from __future__ import annotations

import argparse
import base64
import copy
import dataclasses
import datetime as dt
import functools
import json
import math
import re
import secrets
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Protocol, cast, get_args

import google.oauth2.credentials
import googleapiclient
import pytest
from googleapiclient import discovery

from tests.support.fakes.loopback import LoopbackHttpServer

API_VERSION = "v2alpha1"
DEFAULT_TOKEN = "test-token"
DISCOVERY_DOCUMENT = (
    Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "tpu.v2alpha1.json"
)
PROTO_PACKAGE = "google.cloud.tpu.v2alpha1"
FLEX_START_MAX_SECONDS = 7 * 24 * 3600
NODE_PORT = 8470

# The TPU service's states, in the order a healthy flex-start request walks them.
CREATING = "CREATING"
ACCEPTED = "ACCEPTED"
WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"
PROVISIONING = "PROVISIONING"
ACTIVE = "ACTIVE"
SUSPENDING = "SUSPENDING"
SUSPENDED = "SUSPENDED"
FAILED = "FAILED"
DELETING = "DELETING"
_REMOVED = "REMOVED"  # internal: the resource is gone (GET -> 404)

ZoneMode = Literal[
    "ok",
    "reject_invalid_argument",
    "resource_exhausted",
    "fail",
    "never_capacity",
    "operation_error",
]
ReplayAnswer = Literal["already_exists", "operation"]
HostKeyMode = Literal["present", "late", "absent"]

# Families whose runtime is pinned in DESIGN.md ("facts checked against sources").
RUNTIME_VERSIONS: dict[str, frozenset[str]] = {
    "v5litepod": frozenset({"v2-alpha-tpuv5-lite"}),
    "v6e": frozenset({"v2-alpha-tpuv6e"}),
}
ACCELERATOR_TYPE_RE = re.compile(r"^(v2|v3|v4|v5litepod|v5p|v6e|tpu7x)-(\d+)$")

_RPC_CODES = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}
_HTTP_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FAULT_MESSAGES = {
    429: "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service "
    "'tpu.googleapis.com'.",
    500: "Internal error encountered.",
    503: "The service is currently unavailable.",
    504: "The request timed out. Please try again.",
}

_DURATION_RE = re.compile(r"^\d+(\.\d{1,9})?s$")
_DATETIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"
)
_INT_RE = re.compile(r"^-?\d+$")
_RESOURCE_ID_RE = re.compile(r"^[A-Za-z0-9_.~+%-]+$")  # from the discovery document
_GCE_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_METADATA_KEY_RE = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}


def _fake_ed25519_blob() -> str:
    """A well-formed (but unusable) ssh-ed25519 public key blob, base64 as guest attributes are."""
    raw = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes(range(32))
    return base64.b64encode(raw).decode("ascii")


DEFAULT_HOST_KEY = _fake_ed25519_blob()


# --------------------------------------------------------------------------------------------
# Public configuration types


@dataclass
class StateDurations:
    """Seconds (on the fake's clock) spent in each transient state; small so tests are fast."""

    creating: float = 0.2
    accepted: float = 0.2
    waiting_for_resources: float = 0.2
    provisioning: float = 0.2
    suspending: float = 0.2
    deleting: float = 0.2


@dataclass
class ZoneBehavior:
    """How the fake service behaves in one zone; copied onto each queued resource at create.

    ``mode``:
      * ``ok`` - walks CREATING ... ACTIVE.
      * ``reject_invalid_argument`` - the create call itself is 400 INVALID_ARGUMENT with
        ``message`` (e.g. the real ``FLEX_START provisioning model is not supported for
        accelerator type "v5litepod-1"``), fieldViolation on ``field``.
      * ``resource_exhausted`` - the create call is 429 RESOURCE_EXHAUSTED (quota).
      * ``fail`` - the request is accepted, then goes FAILED at the end of ``fail_from`` with
        ``failedData.error {code: error_code, message}``.
      * ``never_capacity`` - stays in WAITING_FOR_RESOURCES; if ``queueingPolicy.
        validUntilDuration`` was set it goes FAILED once that (scaled) duration has passed.
      * ``operation_error`` - the create answers an Operation that ends, after the CREATING
        duration, with ``error {code: error_code, message}``; the queued resource is then gone.
    """

    mode: ZoneMode = "ok"
    message: str | None = None
    error_code: int = _RPC_CODES["RESOURCE_EXHAUSTED"]
    fail_from: Literal["WAITING_FOR_RESOURCES", "PROVISIONING"] = "WAITING_FOR_RESOURCES"
    field: str = "provisioningModel"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake saw it (headers keyed in lower case; path without the query)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]
    method_id: str | None
    status: int


class ManualClock:
    """A clock that only moves when told to, for tests that must not depend on wall time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self._now += seconds


class Machines(Protocol):
    """The VMs behind the nodes (tests/support/fakes/tpu_vm.py `TpuVmFleet`), when a test wants
    nodes that can be reached: the fake then reports each node's external IP and host keys from its
    VM. Called with the fake's lock held: implementations must not block. `key` is unique per
    queued resource, even when a name is used again."""

    def node_created(self, key: str, node_name: str, metadata: Mapping[str, Any]) -> None: ...

    def external_ip(self, key: str) -> str | None: ...

    def host_keys(self, key: str) -> dict[str, str]: ...

    def node_gone(self, key: str) -> None: ...


# --------------------------------------------------------------------------------------------
# Errors in Google shape


@dataclass(frozen=True)
class FieldViolation:
    """One ``google.rpc.BadRequest.FieldViolation``."""

    field: str
    description: str


class ApiError(Exception):
    """An error answered in the Google JSON error shape."""

    def __init__(
        self,
        http_status: int,
        status: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.status = status
        self.message = message
        self.details = details or []
        self.headers = dict(headers or {})

    def to_json(self) -> dict[str, Any]:
        """The ``{"error": {...}}`` body Google front ends send."""
        error: dict[str, Any] = {
            "code": self.http_status,
            "message": self.message,
            "status": self.status,
        }
        if self.details:
            error["details"] = self.details
        return {"error": error}


def _bad_request(violations: list[FieldViolation]) -> ApiError:
    return ApiError(
        400,
        "INVALID_ARGUMENT",
        "\n".join(v.description for v in violations),
        [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {"field": v.field, "description": v.description} for v in violations
                ],
            }
        ],
    )


def _failed_precondition(message: str, subject: str) -> ApiError:
    return ApiError(
        400,
        "FAILED_PRECONDITION",
        message,
        [
            {
                "@type": "type.googleapis.com/google.rpc.PreconditionFailure",
                "violations": [{"type": "STATE", "subject": subject, "description": message}],
            }
        ],
    )


def _not_found(name: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"Resource '{name}' was not found")


# --------------------------------------------------------------------------------------------
# Discovery document: routes and schema validation


@functools.cache
def discovery_document() -> dict[str, Any]:
    """The TPU v2alpha1 discovery document bundled with the installed client library."""
    with DISCOVERY_DOCUMENT.open(encoding="utf-8") as handle:
        doc: dict[str, Any] = json.load(handle)
    return doc


@dataclass(frozen=True)
class _Route:
    method_id: str  # "tpu.projects.locations.queuedResources.create"
    short_id: str  # "queuedResources.create"
    http_method: str
    pattern: re.Pattern[str]
    request_schema: str | None
    query_params: frozenset[str]


def _routes() -> list[_Route]:
    doc = discovery_document()
    routes: list[_Route] = []

    def walk(resources: Mapping[str, Any]) -> None:
        for resource in resources.values():
            for method in resource.get("methods", {}).values():
                flat = method["flatPath"]
                regex = "^/" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/:]+)", re.escape(flat)) + "$"
                params = method.get("parameters", {})
                routes.append(
                    _Route(
                        method_id=method["id"],
                        short_id=".".join(method["id"].split(".")[-2:]),
                        http_method=method["httpMethod"],
                        pattern=re.compile(regex),
                        request_schema=method.get("request", {}).get("$ref"),
                        query_params=frozenset(
                            n for n, p in params.items() if p["location"] == "query"
                        )
                        | frozenset(doc.get("parameters", {})),
                    )
                )
            walk(resource.get("resources", {}))

    walk(doc["resources"])
    return routes


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _pascal(name: str) -> str:
    return name[:1].upper() + name[1:]


_EPSILON = 1e-9  # so that ManualClock.advance(0.6) after 3 x 0.2 s states lands exactly

_INVALID = object()  # marker: the value failed validation and is left out of the result

# proto oneofs that the discovery document does not express.
_ONEOFS: dict[str, dict[str, tuple[str, ...]]] = {
    "QueuedResource": {"tier": ("bestEffort", "guaranteed", "spot")},
    "QueueingPolicy": {
        "start_timing_constraints": (
            "validUntilDuration",
            "validUntilTime",
            "validAfterDuration",
            "validAfterTime",
            "validInterval",
        )
    },
}


@dataclass(frozen=True)
class _Where:
    """Where a value sits: owning schema and field, JSON path and proto path (for messages)."""

    owner: str
    fname: str
    jpath: str
    ppath: str

    def child(self, owner: str, fname: str, jsuffix: str, psuffix: str) -> _Where:
        join = "." if not jsuffix.startswith("[") else ""
        return _Where(
            owner,
            fname,
            f"{self.jpath}{join}{jsuffix}" if self.jpath else jsuffix,
            f"{self.ppath}{join}{psuffix}" if self.ppath else psuffix,
        )


class SchemaValidator:
    """Validates a JSON body against a discovery schema like the JSON->proto front end.

    ``validate`` returns the normalised body (camelCase keys, output-only fields and nulls
    dropped, enums by name, int32 as numbers, int64 as strings) and the violations found.
    """

    def __init__(
        self, strict_integers: bool = False, schemas: Mapping[str, Any] | None = None
    ) -> None:
        # Another API's discovery document may be given (tests/support/discovery.py: Monitoring).
        self._schemas: Mapping[str, Any] = (
            schemas if schemas is not None else discovery_document()["schemas"]
        )
        self.strict_integers = strict_integers

    def validate(
        self, body: Any, schema_id: str, proto_root: str
    ) -> tuple[dict[str, Any], list[FieldViolation]]:
        """Check ``body`` as message ``schema_id``; ``proto_root`` names it in messages."""
        violations: list[FieldViolation] = []
        result = self._message(body, schema_id, _Where("", "", "", proto_root), violations)
        return (result if isinstance(result, dict) else {}), violations

    def _message(self, value: Any, schema_id: str, where: _Where, out: list[FieldViolation]) -> Any:
        if not isinstance(value, dict):
            self._invalid(out, where, f"type.googleapis.com/{PROTO_PACKAGE}.{schema_id}", value)
            return _INVALID
        props: dict[str, Any] = self._schemas[schema_id].get("properties", {})
        result: dict[str, Any] = {}
        seen: set[str] = set()
        oneof_set: dict[str, str] = {}
        for key, item in value.items():
            name = key if key in props else _snake_to_camel(key)
            if name not in props:
                at = f" at '{where.ppath}'" if where.ppath else ""
                out.append(
                    FieldViolation(
                        f"{where.jpath}.{key}" if where.jpath else key,
                        f'Invalid JSON payload received. Unknown name "{key}"{at}: '
                        "Cannot find field.",
                    )
                )
                continue
            child = where.child(schema_id, name, name, _camel_to_snake(name))
            if name in seen:
                out.append(
                    FieldViolation(
                        child.jpath, f'Invalid JSON payload received. Duplicate field "{key}".'
                    )
                )
                continue
            seen.add(name)
            if item is None:  # proto3 JSON: null means "not set"
                continue
            if not self._claim_oneof(schema_id, name, oneof_set, child, out):
                continue
            spec = props[name]
            normalised = self._value(item, spec, child, out)
            if normalised is _INVALID or spec.get("readOnly"):
                continue
            result[name] = normalised
        return result

    @staticmethod
    def _claim_oneof(
        schema_id: str, name: str, claimed: dict[str, str], where: _Where, out: list[FieldViolation]
    ) -> bool:
        """Record ``name`` in its proto oneof; False (with a violation) if already taken."""
        for oneof, members in _ONEOFS.get(schema_id, {}).items():
            if name not in members:
                continue
            if oneof in claimed:
                out.append(
                    FieldViolation(
                        where.jpath,
                        f"Invalid JSON payload received. Oneof field '{oneof}' is already set. "
                        f"Cannot set '{name}'",
                    )
                )
                return False
            claimed[oneof] = name
        return True

    def _value(
        self, value: Any, spec: Mapping[str, Any], where: _Where, out: list[FieldViolation]
    ) -> Any:
        if "$ref" in spec:
            return self._message(value, spec["$ref"], where, out)
        kind = spec.get("type")
        if kind == "array":
            return self._array(value, spec, where, out)
        if kind == "object":
            return self._map(value, spec, where, out)
        if kind == "any":
            return copy.deepcopy(value)
        if kind == "boolean":
            if not isinstance(value, bool):
                self._invalid(out, where, "TYPE_BOOL", value)
                return _INVALID
            return value
        if kind == "integer" or (kind == "string" and spec.get("format") in ("int64", "uint64")):
            fmt = spec.get("format", "int32")
            number = self._integer(value)
            low, high = _INT_RANGES.get(fmt, _INT_RANGES["int64"])
            if number is None or not low <= number <= high:
                self._invalid(out, where, f"TYPE_{fmt.upper()}", value)
                return _INVALID
            return str(number) if kind == "string" else number
        if kind == "number":
            try:
                if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                    raise ValueError(value)
                return float(value)
            except ValueError:
                self._invalid(out, where, "TYPE_DOUBLE", value)
                return _INVALID
        if kind == "string":
            return self._string(value, spec, where, out)
        return copy.deepcopy(value)

    def _array(
        self, value: Any, spec: Mapping[str, Any], where: _Where, out: list[FieldViolation]
    ) -> Any:
        if not isinstance(value, list):
            self._invalid(out, where, self._type_name(spec["items"], where), value)
            return _INVALID
        items: list[Any] = []
        for index, element in enumerate(value):
            child = where.child(where.owner, where.fname, f"[{index}]", f"[{index}]")
            if element is None:
                out.append(
                    FieldViolation(
                        child.jpath,
                        f"Invalid value at '{child.ppath}': repeated field elements cannot be null",
                    )
                )
                continue
            checked = self._value(element, spec["items"], child, out)
            if checked is not _INVALID:
                items.append(checked)
        return items

    def _map(
        self, value: Any, spec: Mapping[str, Any], where: _Where, out: list[FieldViolation]
    ) -> Any:
        if not isinstance(value, dict):
            self._invalid(out, where, "map", value)
            return _INVALID
        value_spec = spec.get("additionalProperties")
        if value_spec is None:
            return copy.deepcopy(value)
        entries: dict[str, Any] = {}
        for key, element in value.items():
            child = where.child(where.owner, where.fname, f"[{json.dumps(key)}]", f"[{key}]")
            if element is None and value_spec.get("type") != "any":
                out.append(
                    FieldViolation(
                        child.jpath, f"Invalid value at '{child.ppath}': map value is null"
                    )
                )
                continue
            checked = self._value(element, value_spec, child, out)
            if checked is not _INVALID:
                entries[key] = checked
        return entries

    def _string(
        self, value: Any, spec: Mapping[str, Any], where: _Where, out: list[FieldViolation]
    ) -> Any:
        enum = spec.get("enum")
        fmt = spec.get("format")
        if enum is not None:
            if isinstance(value, str) and value in enum:
                return value
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(enum):
                return enum[value]
            self._invalid(out, where, self._type_name(spec, where), value)
            return _INVALID
        if not isinstance(value, str):
            self._invalid(out, where, self._type_name(spec, where), value)
            return _INVALID
        if fmt == "google-duration" and not _DURATION_RE.match(value):
            reason = "duration must end with 's'" if not value.endswith("s") else "bad number"
            out.append(
                FieldViolation(
                    where.jpath,
                    f"Invalid value at '{where.ppath}' "
                    "(type.googleapis.com/google.protobuf.Duration), "
                    f"Field '{where.fname}', Illegal duration format; {reason}",
                )
            )
            return _INVALID
        if fmt == "google-datetime" and not _valid_timestamp(value):
            out.append(
                FieldViolation(
                    where.jpath,
                    f"Invalid value at '{where.ppath}' "
                    "(type.googleapis.com/google.protobuf.Timestamp), "
                    f"Field '{where.fname}', Invalid time format: Failed to parse input",
                )
            )
            return _INVALID
        return value

    def _integer(self, value: Any) -> int | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if self.strict_integers or not value.is_integer():
                return None
            return int(value)
        if isinstance(value, str) and _INT_RE.match(value):
            return int(value)
        return None

    @staticmethod
    def _type_name(spec: Mapping[str, Any], where: _Where) -> str:
        if "$ref" in spec:
            return f"type.googleapis.com/{PROTO_PACKAGE}.{spec['$ref']}"
        if spec.get("enum") is not None:
            return f"type.googleapis.com/{PROTO_PACKAGE}.{where.owner}.{_pascal(where.fname)}"
        fmt = spec.get("format")
        if fmt == "google-duration":
            return "type.googleapis.com/google.protobuf.Duration"
        if fmt == "google-datetime":
            return "type.googleapis.com/google.protobuf.Timestamp"
        return {"boolean": "TYPE_BOOL", "integer": "TYPE_INT32"}.get(
            str(spec.get("type")), "TYPE_STRING"
        )

    @staticmethod
    def _invalid(out: list[FieldViolation], where: _Where, type_name: str, value: Any) -> None:
        at = f"'{where.ppath}'" if where.ppath else "request"
        out.append(
            FieldViolation(
                where.jpath or "body", f"Invalid value at {at} ({type_name}), {json.dumps(value)}"
            )
        )


def _valid_timestamp(value: str) -> bool:
    match = _DATETIME_RE.match(value)
    if not match:
        return False
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


def duration_seconds(value: str) -> float:
    """Seconds in a google-duration string such as ``"14400s"``."""
    return float(value[:-1])


def rfc3339(epoch_seconds: float) -> str:
    """RFC 3339 UTC with microseconds and ``Z``, as Google APIs render timestamps."""
    stamp = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------------------------
# Server-side state


@dataclass
class _QueuedResource:
    project: str
    zone: str
    qr_id: str
    body: dict[str, Any]
    behavior: ZoneBehavior
    created_at: float
    node_number: int
    state: str = CREATING
    state_since: float = 0.0
    state_initiator: str | None = None
    failed_error: dict[str, Any] | None = None
    operation_error: dict[str, Any] | None = None
    node_exists: bool = False
    node_created_at: float | None = None
    active_since: float | None = None
    expire_at: float | None = None
    accepted_at: float | None = None
    removed_at: float | None = None
    #: Wall-clock end of the run, when a test moved it (`end_run_in`); else ACTIVE + run.
    ends_at_wall: float | None = None
    node_numeric_id: str = field(default_factory=lambda: str(secrets.randbelow(9 * 10**18)))

    @property
    def name(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/queuedResources/{self.qr_id}"

    @property
    def node_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.body["tpu"]["nodeSpec"][0]
        return spec

    @property
    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = self.node_spec["node"]
        return node

    @property
    def node_id(self) -> str:
        return str(self.node_spec["nodeId"])

    @property
    def node_name(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.node_id}"

    @property
    def flex_start(self) -> bool:
        return self.body.get("provisioningModel") == "FLEX_START"

    @property
    def max_run_seconds(self) -> float | None:
        value = self.body.get("runDuration", {}).get("maxRunDuration")
        return duration_seconds(value) if value else None

    @property
    def valid_until_seconds(self) -> float | None:
        value = self.body.get("queueingPolicy", {}).get("validUntilDuration")
        return duration_seconds(value) if value else None


@dataclass
class _Operation:
    name: str
    verb: str
    qr: _QueuedResource
    created_at: float
    #: A delete refused after it was accepted: the Operation's `error`, from `ends_at` on.
    error: dict[str, Any] | None = None
    ends_at: float = 0.0


@dataclass
class _FaultRule:
    remaining: int
    status: int
    methods: frozenset[str] | None
    message: str | None
    take_effect: bool = False


@dataclass
class _Call:
    route: _Route
    params: dict[str, str]
    query: dict[str, str]
    body: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeTpuApi


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30  # idle keep-alive connections are dropped after this
    # Each answer, error or not, leaves as one write, at once. CPython's
    # socketserver.StreamRequestHandler defaults to `wbufsize = 0` (every wfile.write is a
    # send()) and `disable_nagle_algorithm = False`, and http.server's end_headers() sends the
    # header block by itself, so an answer used to leave as two segments: headers, then body.
    # Nagle's algorithm (RFC 896) holds the small body until the headers are ACKed, and on a
    # connection kept alive (HTTP/1.1 here; httplib2 keeps one per host in `Http.connections`
    # and reuses it for every request of the discovery client) the client delays that ACK
    # (Linux: up to 40 ms, once the connection has left its quick-ACK start), having nothing
    # to send. So every call cost ~44 ms instead of ~1 ms, and a stack dump of a client that
    # calls in a loop always caught it in http.client's `_safe_read` of the body, waiting on a
    # connection whose handler was already back in `handle_one_request` waiting for the next
    # request line. That is how the delete retry reverted in 457d474 looked like "the fake's
    # connection hung" in CI: that retry never set its once-only flag and looped without end,
    # each turn a 409 and a GET, each stalled ~40 ms. Buffering (`wbufsize = -1`, flushed once
    # by handle_one_request) sends the whole answer in one write, and TCP_NODELAY (the
    # combination the socketserver comment asks for) sends an answer larger than the buffer
    # at once too. tests/loopback/test_fake_tpu_api.py checks that each answer arrives whole.
    wbufsize = -1
    disable_nagle_algorithm = True

    def handle_expect_100(self) -> bool:
        # With the buffered wfile, the interim `100 Continue` must be flushed by hand: the
        # client sends the body only after it (http.server sends it from parse_request).
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet; the fake records requests itself."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        status, payload, extra = self.server.fake.handle(self.command, self.path, headers, raw)
        data = json.dumps(payload, indent=2).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


# --------------------------------------------------------------------------------------------
# The fake


class FakeTpuApi(LoopbackHttpServer):
    """A threaded loopback HTTP fake of the TPU v2alpha1 API; see the module docstring.

    All knobs are plain attributes and may be changed while the fake runs:
    ``durations`` (StateDurations), ``zones`` (zone -> ZoneBehavior, else
    ``default_zone_behavior``), ``seconds_per_run_second`` (fake-clock seconds per second of
    ``maxRunDuration``/``validUntilDuration``; 1.0 = real time), ``host_key_mode``,
    ``host_key_delay``, ``host_keys`` (key type -> base64 blob), ``reject_delete_while_
    provisioning``, ``delete_refusal`` ((HTTP status, status name)), ``delete_refusal_in_operation``
    (the refusal as the accepted delete's Operation error), ``undeletable_states``,
    ``replay_answer``, ``visibility_delay``, ``qr_reports_termination_time``,
    ``validator.strict_integers``, ``token``.
    """

    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        durations: StateDurations | None = None,
        clock: Callable[[], float] | None = None,
        seconds_per_run_second: float = 1.0,
        host_key_mode: HostKeyMode = "present",
        host_key_delay: float = 1.0,
        host_keys: Mapping[str, str] | None = None,
        reject_delete_while_provisioning: bool = True,
        strict_integers: bool = False,
        port: int = 0,
        machines: Machines | None = None,
    ) -> None:
        self.token = token
        #: The VMs behind the nodes; None: nodes are records only (external IP 203.0.113.N,
        #: the `host_keys` knob), as most tests need.
        self.machines = machines
        self.durations = durations or StateDurations()
        self.clock: Callable[[], float] = clock or time.monotonic
        self.seconds_per_run_second = seconds_per_run_second
        self.host_key_mode: HostKeyMode = host_key_mode
        self.host_key_delay = host_key_delay
        self.host_keys: dict[str, str] = dict(host_keys or {"ssh-ed25519": DEFAULT_HOST_KEY})
        self.reject_delete_while_provisioning = reject_delete_while_provisioning
        self.delete_refusal: tuple[int, str] = (400, "FAILED_PRECONDITION")
        self.delete_refusal_in_operation = False
        self.undeletable_states: frozenset[str] = frozenset({PROVISIONING})
        self.replay_answer: ReplayAnswer = "already_exists"
        self.visibility_delay = 0.0
        self.qr_reports_termination_time = True
        self._hidden_accounts: dict[str, tuple[float, bool]] = {}
        self.validator = SchemaValidator(strict_integers=strict_integers)
        self.zones: dict[str, ZoneBehavior] = {}
        self.default_zone_behavior = ZoneBehavior()
        self.requests: list[RecordedRequest] = []

        self._port = port
        self._lock = threading.RLock()
        self._routes = _routes()
        self._qrs: dict[str, _QueuedResource] = {}
        self._operations: dict[str, _Operation] = {}
        self._request_ids: dict[tuple[str, str], str] = {}
        self._faults: list[_FaultRule] = []
        self._node_counter = 0
        self._mono0 = self.clock()
        self._wall0 = time.time()
        super().__init__()
        self._handlers: dict[str, Callable[[_Call], dict[str, Any]]] = {
            "queuedResources.create": self._create_queued_resource,
            "queuedResources.get": self._get_queued_resource,
            "queuedResources.list": self._list_queued_resources,
            "queuedResources.delete": self._delete_queued_resource,
            "nodes.get": self._get_node,
            "nodes.getGuestAttributes": self._get_guest_attributes,
            "operations.get": self._get_operation,
        }

    # -- lifecycle ------------------------------------------------------------------------

    thread_name = "fake-tpu-api"

    def start(self) -> FakeTpuApi:
        """Serve on 127.0.0.1 in a daemon thread (port 0 picks a free port)."""
        server = _Server(("127.0.0.1", self._port), _Handler)
        server.fake = self
        return self._serve(server)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/`` - pass as ``client_options={"api_endpoint": ...}``."""
        return f"http://127.0.0.1:{self.port}/"

    def discovery_client(self, token: str | None = None) -> Any:
        """The real discovery client pointed at this fake, as the product builds it."""
        credentials = google.oauth2.credentials.Credentials(  # type: ignore[no-untyped-call]
            token=token or self.token
        )
        return discovery.build(
            "tpu",
            API_VERSION,
            static_discovery=True,
            credentials=credentials,
            client_options={"api_endpoint": self.base_url},
        )

    # -- knobs and test helpers -----------------------------------------------------------

    def set_zone(
        self,
        zone: str,
        mode: ZoneMode,
        message: str | None = None,
        **kwargs: Any,
    ) -> ZoneBehavior:
        """Configure ``zone``; extra keyword arguments are ``ZoneBehavior`` fields."""
        behavior = ZoneBehavior(mode=mode, message=message, **kwargs)
        with self._lock:
            self.zones[zone] = behavior
        return behavior

    def zone_behavior(self, zone: str) -> ZoneBehavior:
        """The behaviour that applies to a new request in ``zone``."""
        with self._lock:
            return self.zones.get(zone, self.default_zone_behavior)

    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        methods: Iterable[str] | None = None,
        message: str | None = None,
        take_effect: bool = False,
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` in Google shape.

        ``methods`` entries match an HTTP verb (``"POST"``), a full discovery id, or its tail
        (``"queuedResources.create"``, ``"get"``); ``None`` matches every request. Requests
        failed this way change nothing, unless ``take_effect``: then the request is carried out
        and only its answer is replaced by the error (a response lost after the commit).
        Authentication is checked first.
        """
        with self._lock:
            self._faults.append(
                _FaultRule(n, status, frozenset(methods) if methods else None, message, take_effect)
            )

    def reject_service_account(
        self, email: str, seconds: float, *, in_operation: bool = False
    ) -> None:
        """Refuse creates naming ``email`` as the node's service account for ``seconds`` (on
        the fake's clock), as while a new account propagates through IAM: 400 INVALID_ARGUMENT,
        or, with ``in_operation``, an Operation that ends with that error."""
        with self._lock:
            self._hidden_accounts[email] = (self.clock() + seconds, in_operation)

    def expire(self, name: str) -> None:
        """End an ACTIVE queued resource's run now, as when its flex-start duration runs out."""
        with self._lock:
            qr = self._resolve(name)
            if qr.state != ACTIVE:
                raise ValueError(f"{qr.name} is {qr.state}, not ACTIVE")
            qr.expire_at = self.clock()

    def tick(self) -> None:
        """Apply every state change that is due now (the fake only moves when asked)."""
        with self._lock:
            self._advance_all()

    def end_run_in(self, name: str, seconds: float) -> None:
        """Make an ACTIVE flex-start run end `seconds` from now, as if most of its
        `maxRunDuration` had passed: the end time the API reports (`runDuration.
        terminationTime`, the node's `schedulingConfig.terminationTimestamp`) and the moment
        the node goes both move (`seconds` is scaled by `seconds_per_run_second`)."""
        with self._lock:
            qr = self._resolve(name)
            if qr.state != ACTIVE:
                raise ValueError(f"{qr.name} is {qr.state}, not ACTIVE")
            now = self.clock()
            qr.ends_at_wall = self._wall(now) + seconds
            qr.expire_at = now + seconds * self.seconds_per_run_second

    def advance(self, seconds: float) -> None:
        """Move a ``ManualClock`` forward (only valid when the fake was given one)."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs FakeTpuApi(clock=ManualClock())")
        self.clock.advance(seconds)

    def state(self, name: str) -> str | None:
        """Current state of a queued resource (full name or bare id), None once it is gone."""
        with self._lock:
            qr = self._find(name)
            return qr.state if qr is not None else None

    def queued_resource(self, name: str) -> dict[str, Any]:
        """The queued resource as GET would return it."""
        with self._lock:
            return self._qr_json(self._resolve(name))

    def wait_for_state(self, name: str, *states: str, timeout: float = 5.0) -> str | None:
        """Poll (in real time) until the queued resource is in one of ``states``.

        ``"GONE"`` matches a resource that no longer exists. Raises TimeoutError otherwise.
        """
        deadline = time.monotonic() + timeout
        while True:
            current = self.state(name)
            if (current or "GONE") in states:
                return current
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{name} is {current}, wanted one of {states}")
            time.sleep(0.01)

    def requests_for(self, method: str) -> list[RecordedRequest]:
        """Recorded requests whose discovery id or HTTP verb matches ``method``."""
        with self._lock:
            return [r for r in self.requests if _method_matches(method, r.method, r.method_id)]

    # -- HTTP entry point -----------------------------------------------------------------

    def handle(
        self, verb: str, raw_path: str, headers: Mapping[str, str], raw_body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Answer one HTTP request: (status, JSON body, extra headers). Thread-safe."""
        split = urllib.parse.urlsplit(raw_path)
        path = split.path
        query = {
            key: values[-1]
            for key, values in urllib.parse.parse_qs(split.query, keep_blank_values=True).items()
        }
        body: Any = None
        body_error: str | None = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError as exc:
                body_error = f"Invalid JSON payload received. {exc}."
        route, params = self._match(verb, path)
        with self._lock:
            try:
                self._authenticate(headers, query)
                fault = self._take_fault(verb, route)
                if fault is not None and not fault.take_effect:
                    raise self._fault_error(fault)
                if route is None:
                    raise ApiError(404, "NOT_FOUND", f"Requested entity was not found: {path}")
                self._check_query(route, query)
                if body_error is not None and route.request_schema is not None:
                    raise _bad_request([FieldViolation("body", body_error)])
                handler = self._handlers.get(route.short_id)
                if handler is None:
                    raise ApiError(
                        501, "UNIMPLEMENTED", f"{route.method_id} is not implemented by the fake"
                    )
                status, payload, extra = 200, handler(_Call(route, params, query, body)), {}
                if fault is not None:
                    raise self._fault_error(fault)
            except ApiError as error:
                status, payload, extra = error.http_status, error.to_json(), error.headers
            self.requests.append(
                RecordedRequest(
                    method=verb,
                    path=path,
                    query=query,
                    body=body,
                    headers=dict(headers),
                    method_id=route.method_id if route else None,
                    status=status,
                )
            )
        return status, payload, extra

    def _match(self, verb: str, path: str) -> tuple[_Route | None, dict[str, str]]:
        for route in self._routes:
            if route.http_method != verb:
                continue
            match = route.pattern.match(path)
            if match:
                return route, {k: urllib.parse.unquote(v) for k, v in match.groupdict().items()}
        return None, {}

    def _authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> None:
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        token = token or query.get("access_token") or query.get("oauth_token")
        challenge = {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'}
        if not token:
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "Request is missing required authentication credential. Expected OAuth 2 "
                "access token, login cookie or other valid authentication credential.",
                headers=challenge,
            )
        if token != self.token:
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential.",
                headers=challenge,
            )

    def _take_fault(self, verb: str, route: _Route | None) -> _FaultRule | None:
        method_id = route.method_id if route else None
        for rule in self._faults:
            if rule.remaining <= 0:
                continue
            if rule.methods is not None and not any(
                _method_matches(m, verb, method_id) for m in rule.methods
            ):
                continue
            rule.remaining -= 1
            self._faults = [r for r in self._faults if r.remaining > 0]
            return rule
        return None

    @staticmethod
    def _fault_error(rule: _FaultRule) -> ApiError:
        status_name = _HTTP_STATUS_NAMES.get(rule.status, "UNKNOWN")
        message = rule.message or _FAULT_MESSAGES.get(rule.status, status_name)
        details: list[dict[str, Any]] = []
        if rule.status == 429:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "RATE_LIMIT_EXCEEDED",
                    "domain": "googleapis.com",
                    "metadata": {"service": "tpu.googleapis.com"},
                }
            )
        return ApiError(rule.status, status_name, message, details)

    @staticmethod
    def _check_query(route: _Route, query: Mapping[str, str]) -> None:
        unknown = [key for key in query if key not in route.query_params]
        if unknown:
            raise _bad_request(
                [
                    FieldViolation(
                        key,
                        f'Invalid JSON payload received. Unknown name "{key}": Cannot bind '
                        f"query parameter. Field '{key}' could not be found in request message.",
                    )
                    for key in unknown
                ]
            )

    # -- clock and state machine ----------------------------------------------------------

    def _wall(self, mono: float) -> float:
        return self._wall0 + (mono - self._mono0)

    def _advance_all(self) -> None:
        now = self.clock()
        for qr in list(self._qrs.values()):
            self._advance(qr, now)

    def _advance(self, qr: _QueuedResource, now: float) -> None:
        while qr.state != _REMOVED:
            step = self._next_transition(qr)
            if step is None or step[0] > now + _EPSILON:
                return
            at, state, error = step
            self._enter(qr, state, at, error)

    def _next_transition(
        self, qr: _QueuedResource
    ) -> tuple[float, str, dict[str, Any] | None] | None:
        d = self.durations
        since = qr.state_since
        behavior = qr.behavior
        if qr.state == CREATING:
            if behavior.mode == "operation_error":
                return since + d.creating, _REMOVED, self._capacity_error(qr)
            return since + d.creating, ACCEPTED, None
        if qr.state == ACCEPTED:
            return since + d.accepted, WAITING_FOR_RESOURCES, None
        if qr.state == WAITING_FOR_RESOURCES:
            capacity_at = (
                math.inf if behavior.mode == "never_capacity" else since + d.waiting_for_resources
            )
            deadline = math.inf
            if qr.valid_until_seconds is not None:
                deadline = qr.created_at + qr.valid_until_seconds * self.seconds_per_run_second
            if deadline <= capacity_at:
                if math.isinf(deadline):
                    return None
                return deadline, FAILED, self._expiry_error(qr)
            if behavior.mode == "fail" and behavior.fail_from == WAITING_FOR_RESOURCES:
                return capacity_at, FAILED, self._capacity_error(qr)
            return capacity_at, PROVISIONING, None
        if qr.state == PROVISIONING:
            if behavior.mode == "fail" and behavior.fail_from == PROVISIONING:
                return since + d.provisioning, FAILED, self._capacity_error(qr)
            return since + d.provisioning, ACTIVE, None
        if qr.state == ACTIVE:
            return (qr.expire_at, SUSPENDING, None) if qr.expire_at is not None else None
        if qr.state == SUSPENDING:
            return since + d.suspending, SUSPENDED, None
        if qr.state == DELETING:
            return since + d.deleting, _REMOVED, None
        return None

    def _enter(
        self, qr: _QueuedResource, state: str, at: float, error: dict[str, Any] | None
    ) -> None:
        qr.state = state
        qr.state_since = at
        if state == ACCEPTED:
            qr.accepted_at = at
        elif state == PROVISIONING:
            qr.node_exists = True
            qr.node_created_at = at
            if self.machines is not None:
                self.machines.node_created(
                    qr.node_numeric_id, qr.node_name, dict(qr.node.get("metadata", {}))
                )
        elif state == ACTIVE:
            qr.active_since = at
            if qr.flex_start and qr.max_run_seconds is not None:
                qr.expire_at = at + qr.max_run_seconds * self.seconds_per_run_second
        elif state == SUSPENDING:
            # The run ended: the VM is deleted and the node answers 404 from now on (Cloud TPU
            # flex-start docs; see the module docstring), not DELETING.
            qr.state_initiator = "SERVICE"
            qr.node_exists = False
        elif state in (SUSPENDED, FAILED):
            qr.node_exists = False
            qr.failed_error = error
        elif state == _REMOVED:
            qr.node_exists = False
            qr.removed_at = at
            qr.operation_error = error
            self._qrs.pop(qr.name, None)
        if state in (SUSPENDING, SUSPENDED, FAILED, _REMOVED) and self.machines is not None:
            self.machines.node_gone(qr.node_numeric_id)

    @staticmethod
    def _capacity_error(qr: _QueuedResource) -> dict[str, Any]:
        message = qr.behavior.message or (
            f'There is no more capacity in the zone "{qr.zone}"; you can try in another zone '
            "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)"
        )
        return {"code": qr.behavior.error_code, "message": message}

    @staticmethod
    def _expiry_error(qr: _QueuedResource) -> dict[str, Any]:
        policy = qr.body.get("queueingPolicy", {})
        return {
            "code": _RPC_CODES["DEADLINE_EXCEEDED"],
            "message": qr.behavior.message
            or (
                "The queued resource could not be provisioned before its validUntilDuration "
                f"({policy.get('validUntilDuration')}) expired; no capacity became available "
                f'in zone "{qr.zone}".'
            ),
        }

    def _resolve(self, name: str) -> _QueuedResource:
        qr = self._find(name)
        if qr is None:
            raise KeyError(name)
        return qr

    def _find(self, name: str) -> _QueuedResource | None:
        self._advance_all()
        if "/" in name:
            return self._qrs.get(name)
        matches = [qr for qr in self._qrs.values() if qr.qr_id == name]
        if len(matches) > 1:
            raise ValueError(f"queued resource id {name!r} is ambiguous; use the full name")
        return matches[0] if matches else None

    # -- JSON views -----------------------------------------------------------------------

    def _qr_json(self, qr: _QueuedResource) -> dict[str, Any]:
        out: dict[str, Any] = {"name": qr.name, "createTime": rfc3339(self._wall(qr.created_at))}
        out.update(copy.deepcopy(qr.body))
        run = out.get("runDuration")
        if (
            run is not None
            and qr.active_since is not None
            and qr.max_run_seconds is not None
            and self.qr_reports_termination_time
        ):
            run["terminationTime"] = rfc3339(self._run_end(qr))
        state: dict[str, Any] = {"state": qr.state}
        if qr.state_initiator is not None:
            state["stateInitiator"] = qr.state_initiator
        if qr.state == FAILED and qr.failed_error is not None:
            state["failedData"] = {"error": dict(qr.failed_error)}
        out["state"] = state
        return out

    def _run_end(self, qr: _QueuedResource) -> float:
        """The run's wall-clock end: ACTIVE + maxRunDuration, unless a test moved it."""
        if qr.ends_at_wall is not None:
            return qr.ends_at_wall
        assert qr.active_since is not None and qr.max_run_seconds is not None
        return self._wall(qr.active_since) + qr.max_run_seconds

    def _node_state(self, qr: _QueuedResource) -> str:
        if qr.state == PROVISIONING:
            return "CREATING"
        if qr.state == ACTIVE:
            return "READY"
        return "DELETING"  # only a force delete of the queued resource gets here

    def _node_json(self, qr: _QueuedResource) -> dict[str, Any]:
        node_state = self._node_state(qr)
        out: dict[str, Any] = {"name": qr.node_name}
        out.update(copy.deepcopy(qr.node))
        out.update(
            {
                "state": node_state,
                "apiVersion": "V2_ALPHA1",
                "id": qr.node_numeric_id,
                "queuedResource": qr.name,
                "createTime": rfc3339(self._wall(qr.node_created_at or qr.created_at)),
            }
        )
        if node_state != "CREATING":
            endpoint: dict[str, Any] = {
                "ipAddress": f"10.128.0.{qr.node_number}",
                "port": NODE_PORT,
            }
            if qr.node.get("networkConfig", {}).get("enableExternalIps") is True:
                external = f"203.0.113.{qr.node_number}"
                if self.machines is not None:
                    external = self.machines.external_ip(qr.node_numeric_id) or ""
                if external:
                    endpoint["accessConfig"] = {"externalIp": external}
            out["networkEndpoints"] = [endpoint]
        if node_state == "READY":
            out["health"] = "HEALTHY"
        if qr.flex_start and qr.active_since is not None and qr.max_run_seconds is not None:
            scheduling = out.setdefault("schedulingConfig", {})
            scheduling["terminationTimestamp"] = rfc3339(self._run_end(qr))
        return out

    def _operation_json(self, op: _Operation) -> dict[str, Any]:
        now = self.clock()
        self._advance(op.qr, now)
        failed = op.verb == "create" and op.qr.operation_error is not None
        end = op.qr.accepted_at if op.verb == "create" and not failed else op.qr.removed_at
        if op.error is not None:
            failed, end = True, (op.ends_at if now >= op.ends_at else None)
        metadata: dict[str, Any] = {
            "@type": f"type.googleapis.com/{PROTO_PACKAGE}.OperationMetadata",
            "createTime": rfc3339(self._wall(op.created_at)),
            "target": op.qr.name,
            "verb": op.verb,
            "cancelRequested": False,
            "apiVersion": API_VERSION,
        }
        out: dict[str, Any] = {"name": op.name, "metadata": metadata, "done": end is not None}
        if end is not None:
            metadata["endTime"] = rfc3339(self._wall(end))
            if failed:
                out["error"] = dict(op.error or op.qr.operation_error or {})
            elif op.verb == "create":
                response = self._qr_json(op.qr)
                response["@type"] = f"type.googleapis.com/{PROTO_PACKAGE}.QueuedResource"
                out["response"] = response
            else:
                out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        return out

    def _new_operation(self, verb: str, qr: _QueuedResource) -> _Operation:
        now = self.clock()
        op_id = (
            f"operation-{int(self._wall(now) * 1000)}-{secrets.token_hex(7)[:13]}-"
            f"{secrets.token_hex(4)}-{secrets.token_hex(4)}"
        )
        name = f"projects/{qr.project}/locations/{qr.zone}/operations/{op_id}"
        op = _Operation(name=name, verb=verb, qr=qr, created_at=now)
        self._operations[name] = op
        return op

    # -- handlers -------------------------------------------------------------------------

    def _validated_body(self, call: _Call, schema_id: str, proto_root: str) -> dict[str, Any]:
        body = call.body if call.body is not None else {}
        normalised, violations = self.validator.validate(body, schema_id, proto_root)
        if violations:
            raise _bad_request(violations)
        return normalised

    def _create_queued_resource(self, call: _Call) -> dict[str, Any]:
        project, zone = call.params["projectsId"], call.params["locationsId"]
        body = self._validated_body(call, "QueuedResource", "queued_resource")
        self._advance_all()
        request_id = call.query.get("requestId")
        qr_id = call.query.get("queuedResourceId", "")
        if request_id and (zone, request_id) in self._request_ids:
            first = self._operations[self._request_ids[(zone, request_id)]]
            if self.replay_answer == "operation":
                return self._operation_json(first)
            raise ApiError(409, "ALREADY_EXISTS", f"Resource '{first.qr.name}' already exists")
        violations = _create_violations(project, zone, qr_id, body)
        if violations:
            raise _bad_request(violations)
        body.get("runDuration", {}).pop("terminationTime", None)
        name = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        if name in self._qrs:
            raise ApiError(409, "ALREADY_EXISTS", f"Resource '{name}' already exists")
        node_id = body["tpu"]["nodeSpec"][0]["nodeId"]
        for other in self._qrs.values():
            if (other.project, other.zone, other.node_id) == (project, zone, node_id):
                raise ApiError(
                    409, "ALREADY_EXISTS", f"Resource '{other.node_name}' already exists"
                )
        behavior = dataclasses.replace(self.zone_behavior(zone))
        behavior = self._check_service_account(body, behavior)
        accelerator = body["tpu"]["nodeSpec"][0]["node"]["acceleratorType"]
        if behavior.mode == "reject_invalid_argument":
            message = behavior.message or (
                f"{body.get('provisioningModel', 'STANDARD')} provisioning model is not "
                f'supported for accelerator type "{accelerator}"'
            )
            raise _bad_request([FieldViolation(behavior.field, message)])
        if behavior.mode == "resource_exhausted":
            raise ApiError(
                429,
                "RESOURCE_EXHAUSTED",
                behavior.message
                or (
                    f'Quota limit for accelerator type "{accelerator}" in zone "{zone}" has '
                    "been exceeded."
                ),
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [
                            {
                                "subject": f"projects/{project}/locations/{zone}",
                                "description": "TPU quota exceeded",
                            }
                        ],
                    }
                ],
            )
        now = self.clock()
        self._node_counter += 1
        qr = _QueuedResource(
            project=project,
            zone=zone,
            qr_id=qr_id,
            body=body,
            behavior=behavior,
            created_at=now,
            state_since=now,
            node_number=2 + (self._node_counter - 1) % 250,
        )
        self._qrs[name] = qr
        op = self._new_operation("create", qr)
        if request_id:
            self._request_ids[(zone, request_id)] = op.name
        return self._operation_json(op)

    def _check_service_account(
        self, body: Mapping[str, Any], behavior: ZoneBehavior
    ) -> ZoneBehavior:
        """Refuse a node service account the API cannot see yet (``reject_service_account``)."""
        email = body["tpu"]["nodeSpec"][0]["node"].get("serviceAccount", {}).get("email", "")
        until, in_operation = self._hidden_accounts.get(email, (-math.inf, False))
        if self.clock() >= until:
            return behavior
        message = f"Service account {email} does not exist."
        if in_operation:
            return ZoneBehavior(
                mode="operation_error", message=message, error_code=_RPC_CODES["INVALID_ARGUMENT"]
            )
        raise _bad_request([FieldViolation("tpu.nodeSpec[0].node.serviceAccount.email", message)])

    def _visible(self, qr: _QueuedResource) -> bool:
        """False while reads still miss a new queued resource (``visibility_delay``)."""
        return self.clock() >= qr.created_at + self.visibility_delay - _EPSILON

    def _qr_from_call(self, call: _Call) -> _QueuedResource:
        name = (
            f"projects/{call.params['projectsId']}/locations/{call.params['locationsId']}"
            f"/queuedResources/{call.params['queuedResourcesId']}"
        )
        self._advance_all()
        qr = self._qrs.get(name)
        if qr is None:
            raise _not_found(name)
        return qr

    def _get_queued_resource(self, call: _Call) -> dict[str, Any]:
        qr = self._qr_from_call(call)
        if not self._visible(qr):
            raise _not_found(qr.name)
        return self._qr_json(qr)

    def _list_queued_resources(self, call: _Call) -> dict[str, Any]:
        project, zone = call.params["projectsId"], call.params["locationsId"]
        self._advance_all()
        items = [
            self._qr_json(qr)
            for qr in self._qrs.values()
            if (qr.project, qr.zone) == (project, zone) and self._visible(qr)
        ]
        try:
            start = int(call.query.get("pageToken") or 0)
            size = int(call.query.get("pageSize") or 0) or len(items) or 1
        except ValueError:
            raise _bad_request(
                [FieldViolation("pageToken", "Invalid page token or page size")]
            ) from None
        page = items[start : start + size]
        out: dict[str, Any] = {}
        if page:
            out["queuedResources"] = page
        if start + size < len(items):
            out["nextPageToken"] = str(start + size)
        return out

    def _delete_queued_resource(self, call: _Call) -> dict[str, Any]:
        qr = self._qr_from_call(call)
        force_raw = call.query.get("force", "false").lower()
        if force_raw not in ("true", "false", "1", "0"):
            raise _bad_request(
                [
                    FieldViolation(
                        "force",
                        f"Invalid value at 'force' (TYPE_BOOL), \"{call.query.get('force')}\"",
                    )
                ]
            )
        force = force_raw in ("true", "1")
        if qr.state == DELETING:
            return self._operation_json(self._new_operation("delete", qr))
        if qr.state in self.undeletable_states and self.reject_delete_while_provisioning:
            message = (
                f'Cannot delete queued resource "{qr.name}" in {qr.state} state; wait until '
                "it is ACTIVE or FAILED and try again."
            )
            http_status, status_name = self.delete_refusal
            if self.delete_refusal_in_operation:
                # Accepted, then refused: the Operation ends with the refusal after
                # `deleting` seconds, and the queued resource stays as it was.
                op = self._new_operation("delete", qr)
                op.error = {"code": _RPC_CODES.get(status_name, 2), "message": message}
                op.ends_at = self.clock() + self.durations.deleting
                return self._operation_json(op)
            if status_name == "FAILED_PRECONDITION":
                raise _failed_precondition(message, qr.name)
            raise ApiError(http_status, status_name, message)
        if qr.node_exists and not force:
            raise _failed_precondition(
                f'Queued resource "{qr.name}" has node "{qr.node_name}"; delete the nodes '
                "first or set force=true.",
                qr.name,
            )
        qr.state = DELETING
        qr.state_since = self.clock()
        qr.state_initiator = "USER"
        if self.machines is not None:  # force: the node (the VM) is deleted first
            self.machines.node_gone(qr.node_numeric_id)
        return self._operation_json(self._new_operation("delete", qr))

    def _node_from_call(self, call: _Call) -> _QueuedResource:
        project, zone = call.params["projectsId"], call.params["locationsId"]
        node_id = call.params["nodesId"]
        self._advance_all()
        for qr in self._qrs.values():
            if (qr.project, qr.zone, qr.node_id) == (project, zone, node_id) and qr.node_exists:
                return qr
        raise _not_found(f"projects/{project}/locations/{zone}/nodes/{node_id}")

    def _get_node(self, call: _Call) -> dict[str, Any]:
        return self._node_json(self._node_from_call(call))

    def _get_guest_attributes(self, call: _Call) -> dict[str, Any]:
        request = self._validated_body(call, "GetGuestAttributesRequest", "")
        qr = self._node_from_call(call)
        workers = request.get("workerIds")
        if workers and "0" not in workers:
            return {}
        if not self._host_key_published(qr):
            return {}
        query_path = request.get("queryPath", "")
        wanted = query_path.lstrip("/")
        published = (
            self.machines.host_keys(qr.node_numeric_id)
            if self.machines is not None
            else self.host_keys
        )
        items = [
            {"namespace": "hostkeys", "key": key_type, "value": value}
            for key_type, value in published.items()
            if not wanted or wanted == "hostkeys" or f"hostkeys/{key_type}".startswith(wanted)
        ]
        if not items:
            return {}
        return {"guestAttributes": [{"queryPath": query_path, "queryValue": {"items": items}}]}

    def _host_key_published(self, qr: _QueuedResource) -> bool:
        enabled = str(qr.node.get("metadata", {}).get("enable-guest-attributes", ""))
        if enabled.upper() != "TRUE" or qr.active_since is None:
            return False
        if self.host_key_mode == "present":
            return True
        if self.host_key_mode == "late":
            return self.clock() >= qr.active_since + self.host_key_delay
        return False

    def _get_operation(self, call: _Call) -> dict[str, Any]:
        name = (
            f"projects/{call.params['projectsId']}/locations/{call.params['locationsId']}"
            f"/operations/{call.params['operationsId']}"
        )
        op = self._operations.get(name)
        if op is None:
            raise _not_found(name)
        return self._operation_json(op)


def _method_matches(pattern: str, verb: str, method_id: str | None) -> bool:
    if pattern.upper() == verb.upper() and pattern.isupper():
        return True
    if method_id is None:
        return False
    return method_id == pattern or method_id.endswith("." + pattern)


def _create_violations(
    project: str, zone: str, qr_id: str, body: Mapping[str, Any]
) -> list[FieldViolation]:
    """The TPU service's semantic checks on a queued resource that parsed cleanly."""
    out: list[FieldViolation] = []

    def bad(path: str, message: str) -> None:
        out.append(FieldViolation(path, message))

    if not qr_id:
        bad("queuedResourceId", "queued_resource_id must be specified.")
    elif not _RESOURCE_ID_RE.match(qr_id):
        bad("queuedResourceId", f'queued_resource_id "{qr_id}" must match [A-Za-z0-9_.~+%-]+.')

    specs = body.get("tpu", {}).get("nodeSpec", [])
    if not specs:
        bad("tpu.nodeSpec", "tpu.node_spec is required: request exactly one node.")
    elif len(specs) != 1:
        bad("tpu.nodeSpec", "exactly one node_spec is supported.")
    else:
        _check_node_spec(project, zone, specs[0], bad)

    model = body.get("provisioningModel")
    run = body.get("runDuration", {})
    if model == "FLEX_START":
        max_run = run.get("maxRunDuration")
        if not max_run:
            bad(
                "runDuration.maxRunDuration",
                "run_duration.max_run_duration is required for the FLEX_START provisioning model.",
            )
        elif not 0 < duration_seconds(max_run) <= FLEX_START_MAX_SECONDS:
            bad(
                "runDuration.maxRunDuration",
                f"run_duration.max_run_duration {max_run} must be greater than 0s and at most "
                f"{FLEX_START_MAX_SECONDS}s (7 days) for FLEX_START.",
            )
        if "spot" in body:
            bad("spot", "spot and the FLEX_START provisioning model are mutually exclusive.")
        if "guaranteed" in body:
            bad("guaranteed", "guaranteed and FLEX_START are mutually exclusive.")
        scheduling = body.get("tpu", {}).get("nodeSpec", [{}])[0].get("node", {})
        scheduling = scheduling.get("schedulingConfig", {})
        for key in ("spot", "preemptible"):
            if scheduling.get(key):
                bad(
                    f"tpu.nodeSpec[0].node.schedulingConfig.{key}",
                    f"scheduling_config.{key} cannot be combined with FLEX_START.",
                )
    elif run.get("maxRunDuration"):
        bad(
            "runDuration.maxRunDuration",
            "run_duration.max_run_duration is only supported with the FLEX_START "
            "provisioning model.",
        )
    if model == "SPOT" and ("guaranteed" in body or "bestEffort" in body):
        bad("provisioningModel", "SPOT cannot be combined with another tier.")

    for key in ("validUntilDuration", "validAfterDuration"):
        value = body.get("queueingPolicy", {}).get(key)
        if value is not None and duration_seconds(value) <= 0:
            bad(f"queueingPolicy.{key}", f"queueing_policy.{_camel_to_snake(key)} must be > 0s.")
    return out


def _check_node_spec(
    project: str, zone: str, spec: Mapping[str, Any], bad: Callable[[str, str], None]
) -> None:
    base = "tpu.nodeSpec[0]"
    parent = f"projects/{project}/locations/{zone}"
    if spec.get("parent") != parent:
        bad(
            f"{base}.parent",
            f'node_spec.parent "{spec.get("parent", "")}" must be "{parent}", the location of '
            "the queued resource.",
        )
    node_id = spec.get("nodeId")
    if "multiNodeParams" in spec:
        bad(f"{base}.multiNodeParams", "multi_node_params is not supported by this fake.")
    if not node_id:
        bad(f"{base}.nodeId", "node_spec.node_id is required for a single-node request.")
    elif not _GCE_NAME_RE.match(node_id):
        bad(
            f"{base}.nodeId",
            f'node_id "{node_id}" must match [a-z]([-a-z0-9]{{0,61}}[a-z0-9])? (lower case, '
            "start with a letter, at most 63 characters).",
        )
    node = spec.get("node")
    if not node:
        bad(f"{base}.node", "node_spec.node is required.")
        return
    accelerator = node.get("acceleratorType")
    runtime = node.get("runtimeVersion")
    if not accelerator:
        bad(f"{base}.node.acceleratorType", "node.accelerator_type is required.")
    else:
        match = ACCELERATOR_TYPE_RE.match(accelerator)
        if not match:
            bad(
                f"{base}.node.acceleratorType",
                f'Invalid accelerator type "{accelerator}" (gcloud spellings such as '
                '"v5litepod-1" or "v6e-4").',
            )
        elif runtime and runtime not in RUNTIME_VERSIONS.get(match.group(1), {runtime}):
            bad(
                f"{base}.node.runtimeVersion",
                f'Runtime version "{runtime}" is not supported for accelerator type '
                f'"{accelerator}".',
            )
    if not runtime:
        bad(f"{base}.node.runtimeVersion", "node.runtime_version is required.")
    if "networkConfig" in node and "networkConfigs" in node:
        bad(
            f"{base}.node.networkConfigs",
            "network_config and network_configs are mutually exclusive.",
        )
    labels = node.get("labels", {})
    if len(labels) > 64:
        bad(f"{base}.node.labels", "at most 64 labels are allowed.")
    for key, value in labels.items():
        if not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
            bad(
                f"{base}.node.labels[{json.dumps(key)}]",
                f'Invalid label "{key}": "{value}"; keys must match [a-z][a-z0-9_-]{{0,62}} '
                "and values [a-z0-9_-]{0,63}.",
            )
    for index, tag in enumerate(node.get("tags", [])):
        if not _GCE_NAME_RE.match(tag):
            bad(
                f"{base}.node.tags[{index}]",
                f'Invalid network tag "{tag}"; tags must match [a-z]([-a-z0-9]{{0,61}}[a-z0-9])?.',
            )
    metadata = node.get("metadata", {})
    for key in metadata:
        if not _METADATA_KEY_RE.match(key):
            bad(
                f"{base}.node.metadata[{json.dumps(key)}]",
                f'Invalid metadata key "{key}"; keys must match [a-zA-Z0-9_-]{{1,128}}.',
            )
    if sum(len(k) + len(str(v)) for k, v in metadata.items()) > 512 * 1024:
        bad(f"{base}.node.metadata", "metadata exceeds the 512 KB limit.")


# --------------------------------------------------------------------------------------------
# pytest fixtures and manual entry point


@pytest.fixture
def fake_tpu() -> Iterator[FakeTpuApi]:
    """A started FakeTpuApi on a random loopback port, stopped after the test."""
    fake = FakeTpuApi().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def tpu_env(fake_tpu: FakeTpuApi, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpuApi]:
    """`fake_tpu`, with the clients pointed at it (`TPU_API_ENDPOINT` and its token)."""
    monkeypatch.setenv("TPU_API_ENDPOINT", fake_tpu.base_url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", fake_tpu.token)
    yield fake_tpu


@pytest.fixture
def manual_tpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpuApi]:
    """A fake on a clock that moves only when a test says so, with the clients pointed at it."""
    fake = FakeTpuApi(clock=ManualClock()).start()
    monkeypatch.setenv("TPU_API_ENDPOINT", fake.base_url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", fake.token)
    try:
        yield fake
    finally:
        fake.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve the fake for manual poking: ``python -m tests.support.fakes.tpu_api --port 8089``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--state-seconds", type=float, default=2.0, help="per transient state")
    parser.add_argument(
        "--seconds-per-run-second", type=float, default=0.01, help="scales maxRunDuration"
    )
    parser.add_argument(
        "--zone",
        action="append",
        default=[],
        metavar="ZONE=MODE[:MESSAGE]",
        help="e.g. europe-west4-a=reject_invalid_argument",
    )
    args = parser.parse_args(argv)
    seconds = args.state_seconds
    fake = FakeTpuApi(
        token=args.token,
        port=args.port,
        durations=StateDurations(seconds, seconds, seconds, seconds, seconds, seconds),
        seconds_per_run_second=args.seconds_per_run_second,
    )
    for spec in args.zone:
        zone, _, rest = spec.partition("=")
        mode, _, message = rest.partition(":")
        if mode not in get_args(ZoneMode):
            parser.error(f"--zone {spec}: mode must be one of {get_args(ZoneMode)}")
        fake.set_zone(zone, cast(ZoneMode, mode), message or None)
    fake.start()
    print(f"fake TPU v2alpha1 API on {fake.base_url} (bearer token {fake.token!r})", flush=True)
    print(
        f"  curl -H 'Authorization: Bearer {fake.token}' "
        f"{fake.base_url}v2alpha1/projects/p/locations/us-west4-a/queuedResources",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
