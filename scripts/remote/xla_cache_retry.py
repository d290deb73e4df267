"""When and how the compile cache's Cloud Storage calls are tried again (scripts/remote/
xla_cache_api.py).

What is worth a retry, from Google's "Retry strategy" page for Cloud Storage
(https://cloud.google.com/storage/docs/retry-strategy): HTTP 408, 429 and 5xx, socket timeouts
and TCP disconnects. google-cloud-storage (googleapis/python-storage google/cloud/storage/
retry.py) retries 408, 429, 500, 502, 503 and 504 (`_RETRYABLE_STATUS_CODES`) and connection
errors, IncompleteRead, BadStatusLine, timeouts, urllib3's SSLError and ProtocolError
(`_RETRYABLE_TYPES`); this client takes the page's wider "5xx". Which calls: every read (get,
list, download) is idempotent; a write only when it carries `ifGenerationMatch` (the page's
"conditionally idempotent"): repeated, it can land at most once. An unconditional write is
tried once. (python-storage itself, since 3.0, retries uploads by default, preconditions or
not; this client keeps to the page's stricter rule.)

How long: google-api-core's defaults (googleapis/python-api-core google/api_core/retry/
retry_base.py): the first wait up to 1 s, doubling to at most 60 s, for at most 120 s, each
wait drawn uniformly from 0 to that cap (`exponential_sleep_generator`, full jitter, so the 16
workers of a pool that met one 503 do not come back in step). Never past the caller's Deadline.
TPU_VLLM_CACHE_RETRY_INITIAL and TPU_VLLM_CACHE_RETRY_SECONDS override the first cap and the
budget (the tests make them small; 0 seconds means "try once").

Cloud Storage takes about one write per second to one object name (Retry strategy, and
https://cloud.google.com/storage/docs/gcs429 "the object exceeded the rate limit for object
mutation operations"); `WriteSpacing` keeps each name's writes at least WRITE_SPACING apart.
Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import http.client
import os
import random
import socket
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from typing import TypeVar

from xla_cache_base import Deadline, log

T = TypeVar("T")

#: google-api-core retry_base.py _DEFAULT_INITIAL_DELAY, _DEFAULT_MAXIMUM_DELAY,
#: _DEFAULT_DELAY_MULTIPLIER, _DEFAULT_DEADLINE.
INITIAL_DELAY = 1.0
MAXIMUM_DELAY = 60.0
MULTIPLIER = 2.0
RETRY_SECONDS = 120.0
INITIAL_ENV = "TPU_VLLM_CACHE_RETRY_INITIAL"
SECONDS_ENV = "TPU_VLLM_CACHE_RETRY_SECONDS"
#: The least time between two writes of one object name (Cloud Storage's ~1 write/s/object).
WRITE_SPACING = 1.0


#: Socket timeouts and TCP disconnects (ConnectionError covers reset, refused, aborted, broken
#: pipe; http.client's RemoteDisconnected is one too). socket.timeout is TimeoutError only from
#: Python 3.10. A TLS session cut short (ssl.SSLEOFError, an SSLError) is a disconnect too:
#: python-storage retries urllib3's SSLError and ProtocolError. A certificate the client
#: refuses is not transient (NOT_TRANSIENT).
TRANSIENT = (
    ConnectionError,
    TimeoutError,
    socket.timeout,
    ssl.SSLError,
    http.client.IncompleteRead,
    http.client.BadStatusLine,
)
NOT_TRANSIENT = (ssl.SSLCertVerificationError,)


class BodyCutShort(ConnectionError):
    """A download whose connection ended before its Content-Length: a TCP disconnect."""


def retryable(error: BaseException) -> bool:
    """Whether `error` is a transient failure the Retry strategy page says to try again."""
    if isinstance(error, urllib.error.HTTPError):
        return error.code in (408, 429) or 500 <= error.code <= 599
    if isinstance(error, urllib.error.URLError):
        reason = error.reason
        return isinstance(reason, BaseException) and retryable(reason)
    return isinstance(error, TRANSIENT) and not isinstance(error, NOT_TRANSIENT)


def describe(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    reason = getattr(error, "reason", None)
    return f"{type(error).__name__}: {reason if reason is not None else error}"


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = default
    return value if value >= 0 else default


class Policy:
    """Exponential backoff with full jitter, within a budget and the caller's deadline."""

    def __init__(self, initial: float | None = None, budget: float | None = None) -> None:
        self.initial = _env_seconds(INITIAL_ENV, INITIAL_DELAY) if initial is None else initial
        self.budget = _env_seconds(SECONDS_ENV, RETRY_SECONDS) if budget is None else budget
        self.sleep: Callable[[float], None] = time.sleep

    def delays(self) -> Iterator[float]:
        cap = min(self.initial, MAXIMUM_DELAY)
        while True:
            yield random.uniform(0.0, cap)  # noqa: S311 - jitter, not security
            cap = min(cap * MULTIPLIER, MAXIMUM_DELAY)

    def run(
        self,
        call: Callable[[], T],
        what: str,
        deadline: Deadline,
        *,
        retry: bool = True,
        stopped: Callable[[], bool] = lambda: False,
    ) -> T:
        """`call()`, tried again after each transient failure while the budget and the
        deadline last; the last failure is raised as it was."""
        started = time.monotonic()
        delays = self.delays()
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except Exception as error:
                if not retry or not retryable(error) or stopped():
                    raise
                delay = next(delays)
                spent = time.monotonic() - started
                if spent + delay > self.budget or delay >= deadline.left():
                    raise
                log(f"{what}: {describe(error)}; trying again in {delay:.2f}s (attempt {attempt})")
                self.sleep(delay)


class WriteSpacing:
    """Each object name's last write (the end of its last attempt, answered or not), so the next
    one waits until WRITE_SPACING has passed. A 412 counts too: it says another writer has just
    written the name."""

    def __init__(self, spacing: float = WRITE_SPACING) -> None:
        self.spacing = spacing
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, name: str, deadline: Deadline) -> None:
        with self._lock:
            last = self._last.get(name)
        if last is None:
            return
        gap = last + self.spacing - time.monotonic()
        if gap > 0:
            time.sleep(min(gap, max(deadline.left(), 0.0)))
            deadline.check(f"write {name}")

    def wrote(self, name: str) -> None:
        with self._lock:
            self._last[name] = time.monotonic()
