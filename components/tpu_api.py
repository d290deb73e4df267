"""A thin, retrying client for the TPU v2alpha1 queued-resource API.

Only the v2alpha1 discovery document (bundled with google-api-python-client) carries the
flex-start fields (`provisioningModel`, `runDuration`), so this wraps the discovery client rather
than the GAPIC library. The client is built per call site, never at import time, because the
dynamic provider that uses it is pickled and re-imported by Pulumi's provider host.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import google_auth_httplib2
import httplib2
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from components.google_credentials import google_credentials

#: Override of the API endpoint, for Private Service Connect and for tests.
ENDPOINT_ENV = "TPU_API_ENDPOINT"
HTTP_TIMEOUT_SECONDS = 60
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")


@dataclass(frozen=True)
class ApiError(Exception):
    """A TPU API error with Google's status (INVALID_ARGUMENT, NOT_FOUND, ...) and message."""

    http_status: int
    status: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} ({self.http_status}): {self.message}"

    @classmethod
    def from_http_error(cls, error: HttpError) -> ApiError:
        status, message = "UNKNOWN", str(error)
        try:
            body = json.loads(error.content.decode("utf-8"))["error"]
            status = str(body.get("status") or status)
            message = str(body.get("message") or message)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return cls(int(error.resp.status), status, message)


def report(message: str) -> None:
    """Progress for the operator. Python dynamic providers have no engine connection, so
    `pulumi.log` goes nowhere; provider stderr reaches the Pulumi CLI as diagnostics."""
    print(f"tpu-vllm: {message}", file=sys.stderr, flush=True)


def poll_delays(cap: float) -> Iterator[float]:
    """2, 4, 8 ... seconds up to `cap`: quick transitions are seen quickly, long waits cost few
    API calls."""
    delay = min(2.0, cap)
    while True:
        yield delay
        delay = min(delay * 2, cap)


class TpuApi:
    """Queued resources and nodes, with bounded exponential backoff on 429 and 5xx answers."""

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
        self._attempts = max(1, retry_attempts)
        self._base = retry_base_seconds

    def _call(self, what: str, request: Callable[[], Any]) -> Any:
        for attempt in range(1, self._attempts + 1):
            try:
                return request().execute()
            except HttpError as error:
                api_error = ApiError.from_http_error(error)
                if api_error.http_status not in RETRYABLE_STATUS or attempt == self._attempts:
                    raise api_error from None
                delay = self._base * 2 ** (attempt - 1) * (0.5 + random.random() / 2)  # noqa: S311
                report(f"{what}: {api_error}; retrying in {delay:.1f} s")
                time.sleep(delay)
        raise AssertionError("unreachable")

    @property
    def _queued(self) -> Any:
        return self._service.projects().locations().queuedResources()

    @property
    def _nodes(self) -> Any:
        return self._service.projects().locations().nodes()

    def create_queued_resource(self, parent: str, qr_id: str, body: dict[str, Any]) -> Any:
        return self._call(
            f"create {parent}/queuedResources/{qr_id}",
            lambda: self._queued.create(parent=parent, queuedResourceId=qr_id, body=body),
        )

    def get_queued_resource(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"get {name}", lambda: self._queued.get(name=name)))

    def delete_queued_resource(self, name: str) -> Any:
        return self._call(f"delete {name}", lambda: self._queued.delete(name=name, force=True))

    def get_node(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"get {name}", lambda: self._nodes.get(name=name)))

    def get_guest_attributes(self, name: str, query_path: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"guest attributes of {name}",
                lambda: self._nodes.getGuestAttributes(name=name, body={"queryPath": query_path}),
            )
        )
