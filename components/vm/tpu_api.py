"""A thin client for the TPU v2alpha1 queued-resource API; the library retries 429 and 5xx.

Only the v2alpha1 discovery document (bundled with google-api-python-client) carries the
flex-start fields (`provisioningModel`, `runDuration`), hence the discovery client, not GAPIC.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import google_auth_httplib2
import httplib2
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from components.vm.google_credentials import google_credentials

#: For Private Service Connect and for tests.
ENDPOINT_ENV = "TPU_API_ENDPOINT"
HTTP_TIMEOUT_SECONDS = 60
#: google.rpc.Code (googleapis `google/rpc/code.proto`): number -> (name, its HTTP status).
RPC_CODES: dict[int, tuple[str, int]] = {
    1: ("CANCELLED", 499),
    2: ("UNKNOWN", 500),
    3: ("INVALID_ARGUMENT", 400),
    4: ("DEADLINE_EXCEEDED", 504),
    5: ("NOT_FOUND", 404),
    6: ("ALREADY_EXISTS", 409),
    7: ("PERMISSION_DENIED", 403),
    8: ("RESOURCE_EXHAUSTED", 429),
    9: ("FAILED_PRECONDITION", 400),
    10: ("ABORTED", 409),
    11: ("OUT_OF_RANGE", 400),
    12: ("UNIMPLEMENTED", 501),
    13: ("INTERNAL", 500),
    14: ("UNAVAILABLE", 503),
    15: ("DATA_LOSS", 500),
    16: ("UNAUTHENTICATED", 401),
}
_FIELD_IN_MESSAGE = re.compile(r"at '([^']+)'")


@dataclass(frozen=True)
class ApiError(Exception):
    """A TPU API error from an HTTP answer or an operation's `error` (a google.rpc.Status),
    so a refusal is judged the same wherever it arrives."""

    http_status: int
    status: str
    message: str
    #: `fieldViolations[].field` of a google.rpc.BadRequest detail.
    fields: tuple[str, ...] = ()
    #: How many times the request was sent: tells a replayed create from a first one.
    attempts: int = 1
    in_operation: bool = False

    def __str__(self) -> str:
        where = "in the operation" if self.in_operation else str(self.http_status)
        return f"{self.status} ({where}): {self.message}"

    @property
    def field_names(self) -> str:
        fields = self.fields or tuple(_FIELD_IN_MESSAGE.findall(self.message))
        return ", ".join(fields) if fields else "no field named by the API"

    @classmethod
    def from_http_error(cls, error: HttpError, attempts: int = 1) -> ApiError:
        status, message = "UNKNOWN", str(error)
        fields: tuple[str, ...] = ()
        try:
            body = json.loads(error.content.decode("utf-8"))["error"]
            status = str(body.get("status") or status)
            message = str(body.get("message") or message)
            fields = _violated_fields(body.get("details"))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return cls(int(error.resp.status), status, message, fields, attempts)

    @classmethod
    def from_status(cls, error: Mapping[str, Any]) -> ApiError:
        """An Operation's `error` or a FAILED queued resource's `failedData.error`."""
        code = int(error.get("code") or 2)
        name, http_status = RPC_CODES.get(code, ("UNKNOWN", 500))
        message = str(error.get("message") or "no reason given")
        fields = _violated_fields(error.get("details"))
        return cls(http_status, name, message, fields, in_operation=True)


def _violated_fields(details: Any) -> tuple[str, ...]:
    fields: list[str] = []
    for detail in details or ():
        if isinstance(detail, Mapping) and str(detail.get("@type", "")).endswith("BadRequest"):
            for violation in detail.get("fieldViolations") or ():
                if isinstance(violation, Mapping) and violation.get("field"):
                    fields.append(str(violation["field"]))
    return tuple(fields)


def report(message: str) -> None:
    """One progress line on stderr, which the engine shows as a diagnostic (plugin.go
    `runtrace`): `pulumi.log` takes the same path in the provider host, which has no engine
    address (pulumi/log.py), and its debug level prints nothing there."""
    print(f"tpu-vllm: {message}", file=sys.stderr, flush=True)


def poll_delays(cap: float) -> Iterator[float]:
    """2, 4, 8 ... seconds up to `cap`: quick changes are seen soon, long waits cost few calls."""
    delay = min(2.0, cap)
    while True:
        yield delay
        delay = min(delay * 2, cap)


class TpuApi:
    """Queued resources, operations and nodes.

    google-api-python-client retries 429/5xx itself (`googleapiclient/http.py`
    `_retry_request`: `rand() * 2**n` s, same URI); its request's `_sleep`, the hook its own
    tests set, is replaced to scale that backoff, report each retry and count the attempts.
    """

    def __init__(self, *, retry_attempts: int = 6, retry_base_seconds: float = 2.0) -> None:
        endpoint = os.environ.get(ENDPOINT_ENV)
        http = google_auth_httplib2.AuthorizedHttp(
            google_credentials(), http=httplib2.Http(timeout=HTTP_TIMEOUT_SECONDS)
        )
        self._service: Any = discovery.build(
            "tpu",
            "v2alpha1",
            http=http,
            static_discovery=True,
            cache_discovery=False,
            client_options={"api_endpoint": endpoint} if endpoint else None,
        )
        self._retries = max(1, retry_attempts) - 1
        self._scale = retry_base_seconds / 2

    def _call(self, what: str, request: Any) -> Any:
        attempts = 1

        def before_retry(seconds: float) -> None:
            nonlocal attempts
            delay = seconds * self._scale
            report(f"{what}: retry {attempts} of {self._retries} in {delay:.1f} s")
            attempts += 1
            time.sleep(delay)

        request._sleep = before_retry
        try:
            return request.execute(num_retries=self._retries)
        except HttpError as error:
            raise ApiError.from_http_error(error, attempts) from None

    @property
    def _queued(self) -> Any:
        return self._service.projects().locations().queuedResources()

    @property
    def _nodes(self) -> Any:
        return self._service.projects().locations().nodes()

    def create_queued_resource(
        self, parent: str, qr_id: str, body: dict[str, Any], request_id: str
    ) -> dict[str, Any]:
        request = self._queued.create(
            parent=parent, queuedResourceId=qr_id, requestId=request_id, body=body
        )
        return dict(self._call(f"create {parent}/queuedResources/{qr_id}", request))

    def get_operation(self, name: str) -> dict[str, Any]:
        request = self._service.projects().locations().operations().get(name=name)
        return dict(self._call(f"get {name}", request))

    def get_queued_resource(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"get {name}", self._queued.get(name=name)))

    def delete_queued_resource(self, name: str) -> Any:
        return self._call(f"delete {name}", self._queued.delete(name=name, force=True))

    def get_node(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"get {name}", self._nodes.get(name=name)))

    def get_guest_attributes(self, name: str, query_path: str) -> dict[str, Any]:
        request = self._nodes.getGuestAttributes(name=name, body={"queryPath": query_path})
        return dict(self._call(f"guest attributes of {name}", request))
