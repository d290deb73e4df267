"""When the compile cache's Cloud Storage calls are tried again, and for how long.

What and which calls: https://cloud.google.com/storage/docs/retry-strategy (408, 429, 5xx,
timeouts, disconnects; a write only with `ifGenerationMatch`), stricter than python-storage,
which retries uploads regardless. How long: google-api-core's `exponential_sleep_generator`
(full jitter, so a pool's 16 workers that met one 503 do not come back in step). Why and how:
docs/compile-cache.md "When Cloud Storage fails for a moment".
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

#: google-api-core retry_base.py's _DEFAULT_* values.
INITIAL_DELAY = 1.0
MAXIMUM_DELAY = 60.0
MULTIPLIER = 2.0
RETRY_SECONDS = 120.0
INITIAL_ENV = "TPU_VLLM_CACHE_RETRY_INITIAL"
SECONDS_ENV = "TPU_VLLM_CACHE_RETRY_SECONDS"
#: Cloud Storage takes about one write per second to one object name (docs/gcs429).
WRITE_SPACING = 1.0


#: socket.timeout is TimeoutError only from Python 3.10; a TLS session cut short is a
#: disconnect too (python-storage retries urllib3's SSLError), a refused certificate is not.
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
    """A body shorter than its Content-Length: a TCP disconnect."""


def retryable(error: BaseException) -> bool:
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
        """The last failure is raised as it was."""
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
    """Each name's last write attempt, answered or not: a 412 too, as another writer just wrote."""

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
