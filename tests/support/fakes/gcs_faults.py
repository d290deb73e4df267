"""Transient failures the fake Cloud Storage JSON API (tests/support/fakes/gcs_api.py) can inject:
an error status with the service's error body, a connection reset before the answer, a reset
partway through a resumable upload's bytes, or a request done whose answer is lost.

Why these: Google's "Retry strategy" page for Cloud Storage
(https://cloud.google.com/storage/docs/retry-strategy) names 408, 429, 5xx, socket timeouts and
TCP disconnects as the transient failures a client meets and should retry. The bodies follow
the JSON API's error format ("HTTP status and error codes for JSON",
https://cloud.google.com/storage/docs/json_api/v1/status-codes: `error.code`, `error.message`,
`error.errors[]` with `domain`, `reason`, `message`); the 429 text is the one the service gives
for a name written faster than about once a second (https://cloud.google.com/storage/docs/gcs429,
reason `rateLimitExceeded`). A reset is a real one: SO_LINGER 0, so the close sends RST.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, NoReturn

#: (domain, reason, message) of each injectable status; {name} is "BUCKET/OBJECT".
ERRORS = {
    408: ("global", "requestTimeout", "Request Timeout"),
    429: (
        "usageLimits",
        "rateLimitExceeded",
        "The object {name} exceeded the rate limit for object mutation operations (create, "
        "update, and delete). Please reduce your request rate. See "
        "https://cloud.google.com/storage/docs/gcs429.",
    ),
    500: ("global", "backendError", "We encountered an internal error. Please try again."),
    502: ("global", "backendError", "Bad Gateway"),
    503: ("global", "backendError", "We encountered an internal error. Please try again."),
    504: ("global", "backendError", "Gateway Timeout"),
}


@dataclass
class Injection:
    """What the next `times` requests whose method is `method` and whose target (the decoded
    path, and for a resumable session its object name) contains `match` meet."""

    method: str
    match: str
    status: int = 0  # 0: no answer, the connection is reset
    times: int = 1
    after_bytes: int | None = None  # a resumable PUT: reset after this many body bytes
    lose_answer: bool = False  # the request is carried out, then the connection is reset


class Injections:
    def __init__(self) -> None:
        self._items: list[Injection] = []
        self._lock = threading.Lock()

    def add(self, injection: Injection) -> None:
        with self._lock:
            self._items.append(injection)

    def take(self, method: str, target: str) -> Injection | None:
        """The first injection that applies, counted as used."""
        with self._lock:
            for item in self._items:
                if item.times > 0 and item.method == method and item.match in target:
                    item.times -= 1
                    return item
        return None


def error_body(status: int, name: str) -> dict[str, Any]:
    domain, reason, message = ERRORS.get(status, ("global", "backendError", "Backend Error"))
    text = message.format(name=name)
    return {
        "error": {
            "code": status,
            "message": text,
            "errors": [{"message": text, "domain": domain, "reason": reason}],
        }
    }


class Reset(Exception):
    """Raised by a handler that has reset its connection (the server ignores it)."""


def reset(connection: socket.socket) -> NoReturn:
    """Abort the connection: with SO_LINGER 0 the close that follows sends RST, not FIN."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raise Reset
