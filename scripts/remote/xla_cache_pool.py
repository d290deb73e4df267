"""The bounded pool the JSON API moves objects with, both ways.

A transfer is a few hundred objects, each paying a round trip before its first byte, so one at
a time spends most of it waiting. The first failure stops the running workers and waits for
them, so nothing is still written once the caller moves on. Measured: docs/compile-cache.md
"Restore speed".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from xla_cache_base import MTIME_KEY, Deadline, log

T = TypeVar("T")

#: What `gcloud storage` starts for a multi-file transfer on 4+ CPUs (optimize_parameters_util.py
#: MULTI_FILE_HIGH_CPU_PROCESS_COUNT), far below a bucket's ~1000 writes/s; 32 gave only ~20%
#: more against the loopback fake (benchmarks/restore_speed.py).
DEFAULT_WORKERS = 16
WORKERS_ENV = "TPU_VLLM_CACHE_WORKERS"
MAX_WORKERS = 64
PROGRESS_SECONDS = 10.0
#: (going on, done, preposition before the URL)
DOWNLOAD = ("downloading", "downloaded", "from")
UPLOAD = ("uploading", "uploaded", "to")
TOUCH = ("touching", "touched", "under")


def pool_workers() -> int:
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return DEFAULT_WORKERS
    try:
        workers = int(raw)
    except ValueError:
        workers = 0
    if not 1 <= workers <= MAX_WORKERS:
        log(
            f"{WORKERS_ENV}={raw!r} is not a whole number from 1 to {MAX_WORKERS}; "
            f"moving {DEFAULT_WORKERS} objects at a time"
        )
        return DEFAULT_WORKERS
    return workers


class Stop:
    """Set when the caller abandons a transfer. `set` also shuts down each worker's socket, so a
    worker waiting on a silent server wakes at once instead of at its socket timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            for sock in self._sockets:
                # The plain socket's shutdown(2), also under TLS: SSLSocket.shutdown would drop
                # the TLS state the reading thread is reading through.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    @contextlib.contextmanager
    def watching(self, sock: socket.socket | None) -> Iterator[None]:
        if sock is None:
            yield
            return
        with self._lock:
            self._sockets.add(sock)
        try:
            yield
        finally:
            with self._lock:
                self._sockets.discard(sock)


class Progress:
    """Counted by the workers, logged by the caller's thread."""

    def __init__(
        self, url: str, objects: int, total_bytes: int, verbs: tuple[str, str, str] = DOWNLOAD
    ) -> None:
        self.url = url
        self.objects = objects
        self.total_bytes = total_bytes
        self.verbs = verbs
        self.finished = 0
        self.kept = 0
        self.moved = 0
        self.kept_bytes = 0
        self.started = time.time()
        self._logged = self.started
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.moved += nbytes

    def done(self, nbytes: int, kept: bool = False) -> None:
        with self._lock:
            self.finished += 1
            if kept:
                self.kept += 1
                self.kept_bytes += nbytes

    def rate(self) -> float:
        """MB/s so far."""
        with self._lock:
            moved = self.moved
        return moved / 1e6 / max(time.time() - self.started, 1e-6)

    def log_now(self, final: bool = False) -> None:
        now = time.time()
        if not final and now - self._logged < PROGRESS_SECONDS:
            return
        self._logged = now
        with self._lock:
            finished, kept, moved = self.finished, self.kept, self.moved
            needed = self.total_bytes - self.kept_bytes
        seconds = max(now - self.started, 1e-6)
        rate = f"{moved / 1e6 / seconds:.1f} MB/s"
        already = f"; {kept} already there" if kept else ""
        going, gone, where = self.verbs
        if final:
            log(
                f"{gone} {finished - kept} objects ({moved / 1e6:.1f} MB) {where} "
                f"{self.url} in {seconds:.1f}s, {rate}{already}"
            )
        else:
            log(
                f"{going}: {finished} of {self.objects} objects, "
                f"{moved / 1e6:.1f} of {needed / 1e6:.1f} MB after {seconds:.0f}s, "
                f"{rate}{already}"
            )


def run_pool(
    calls: Sequence[Callable[[], T]],
    *,
    workers: int,
    deadline: Deadline,
    what: str,
    progress: Progress,
    stop: Stop,
    name: str,
) -> list[T]:
    """Run `calls`, `workers` at a time; their results in order, or the first failure. It
    returns or raises only once no worker runs any more."""
    results: list[T] = []
    if not calls:
        return results
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(calls))), thread_name_prefix=name)
    futures = [pool.submit(call) for call in calls]
    pending: set[Future[T]] = set(futures)
    try:
        while pending:
            wait_for = max(min(PROGRESS_SECONDS, deadline.left()), 0.0)
            done, pending = wait(pending, timeout=wait_for, return_when=FIRST_EXCEPTION)
            for future in futures:  # the first failure, in submission order
                if future in done and future.exception() is not None:
                    # A socket timed out at the deadline: say so, as the wait would have.
                    if deadline.left() <= 0:
                        deadline.check(what)
                    future.result()
            if pending:
                deadline.check(what)
                progress.log_now()
    except BaseException:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        # A cancelled future never counts as done for `wait`: leave those out.
        wait([future for future in pending if not future.cancelled()])
        raise
    pool.shutdown(wait=True)
    progress.log_now(final=True)
    return [future.result() for future in futures]


def response_socket(response: Any) -> socket.socket | None:
    """The socket a urllib response reads from, or None. The one way to it: urllib drops its
    own reference (Lib/urllib/request.py `do_open`), the response's SocketIO keeps `_sock`."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def expected_bytes(response: Any, item: dict[str, Any]) -> int | None:
    """Its Content-Length, else the object's listed size."""
    for raw in (response.headers.get("Content-Length"), item.get("size")):
        try:
            if raw is not None:
                return int(raw)
        except (TypeError, ValueError):
            continue
    return None


def size_of(item: dict[str, Any]) -> int:
    try:
        return int(item.get("size", 0))
    except (TypeError, ValueError):
        return 0


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def object_mtime(item: dict[str, Any]) -> int | None:
    """Its saved mtime, else its creation time, as `gcloud storage rsync` does."""
    raw = (item.get("metadata") or {}).get(MTIME_KEY)
    try:
        if raw is not None:
            return int(raw)
        created = str(item.get("timeCreated") or "")
        if created:
            stamp = dt.datetime.strptime(created[:19], "%Y-%m-%dT%H:%M:%S")
            return int(stamp.replace(tzinfo=dt.timezone.utc).timestamp())  # noqa: UP017
    except ValueError:
        return None
    return None
