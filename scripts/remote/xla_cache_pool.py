"""The bounded pool the JSON API path moves objects with, both ways (scripts/remote/xla_cache.py).

A restore is a few hundred objects (seed 000: 197 MB for E2B) and each request pays a round
trip before its first byte, so one at a time spends most of the transfer waiting; a save of a
cold start sends as many. So both run `workers` requests at once (TPU_VLLM_CACHE_WORKERS), the
first failure fails the whole transfer, nothing not yet started is started, and the running
ones are stopped (`Stop`) and waited for: the caller's time counts all of it, and nothing is
still written once it moves on. `Progress` counts objects and bytes for a line every
PROGRESS_SECONDS and a last one with the rate.
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

#: How many objects the JSON API path moves at once (TPU_VLLM_CACHE_WORKERS overrides it).
#: 16 is what `gcloud storage` itself starts for a multi-file transfer on a machine with 4+
#: CPUs (16 processes, googlecloudsdk/command_lib/storage/optimize_parameters_util.py
#: MULTI_FILE_HIGH_CPU_PROCESS_COUNT, each with 4 threads), far below a bucket's initial ~5000
#: reads/s and ~1000 writes/s (Cloud Storage docs, request rate guidelines), and cheap here:
#: each worker streams in BLOCK-sized pieces, so memory stays at workers x BLOCK whatever the
#: entry sizes. Against a loopback fake with 30 ms per request (benchmarks/restore_speed.py)
#: 16 gave 10-13x the serial MB/s and 32 only ~20% more than 16, for twice the connections.
DEFAULT_WORKERS = 16
WORKERS_ENV = "TPU_VLLM_CACHE_WORKERS"
MAX_WORKERS = 64
#: How often a transfer logs its progress.
PROGRESS_SECONDS = 10.0
#: How a Progress line names its transfer: (going on, done, preposition before the URL).
DOWNLOAD = ("downloading", "downloaded", "from")
UPLOAD = ("uploading", "uploaded", "to")
TOUCH = ("touching", "touched", "under")


def pool_workers() -> int:
    """The pool's size: TPU_VLLM_CACHE_WORKERS, else DEFAULT_WORKERS."""
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
    """A transfer's stop signal, set by the caller's thread when it abandons the transfer (a
    failed object, the deadline). The workers check it between reads and writes; `set` also
    shuts down the socket each one is reading from, so a worker waiting on a silent server
    wakes at once (its read returns end-of-stream) instead of at its socket timeout."""

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
                # The plain socket's shutdown(2), also under TLS: it ends the stream for the
                # reading thread (recv sees end-of-stream), where SSLSocket.shutdown would
                # also drop the TLS state that thread is reading through.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    @contextlib.contextmanager
    def watching(self, sock: socket.socket | None) -> Iterator[None]:
        """While a worker reads from `sock`, `set` shuts it down."""
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
    """A transfer's objects and bytes, counted by its workers and logged by the caller's
    thread (one line every PROGRESS_SECONDS, and a last one with the rate)."""

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
        """MB/s so far (the summary's figure, and the last line's)."""
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
    """Run `calls`, `workers` at a time; their results in order, or the first failure.

    It returns or raises only once no worker runs any more. On a failure or the deadline the
    calls not started yet are cancelled and `stop` is set, which the running ones see at their
    next read or write (a socket they wait on is shut down), so each ends promptly; every
    socket timeout is aimed at the deadline besides.
    """
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
                    # A worker whose socket timed out at the bound (its timeout is aimed at
                    # it) failed because of the bound: say so, as the wait would have.
                    if deadline.left() <= 0:
                        deadline.check(what)
                    future.result()
            if pending:
                deadline.check(what)
                progress.log_now()
    except BaseException:
        stop.set()  # the running workers' sockets are shut down: they wake at once
        pool.shutdown(wait=False, cancel_futures=True)
        # A cancelled future never counts as done for `wait`: leave those out.
        wait([future for future in pending if not future.cancelled()])
        raise
    pool.shutdown(wait=True)
    progress.log_now(final=True)
    return [future.result() for future in futures]


def response_socket(response: Any) -> socket.socket | None:
    """The socket a urllib response reads from, or None if it cannot be found.

    http.client.HTTPResponse reads from `sock.makefile("rb")` (CPython Lib/http/client.py
    `HTTPResponse.__init__`), a BufferedReader over socket.SocketIO, which keeps the socket as
    `_sock` (Lib/socket.py); urllib drops the connection's own reference to it once the
    response is open (Lib/urllib/request.py `AbstractHTTPHandler.do_open`), so this is the
    one way to it. TLS included (an ssl.SSLSocket is a socket.socket).
    """
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def expected_bytes(response: Any, item: dict[str, Any]) -> int | None:
    """How long the body must be: its Content-Length, else the object's listed size."""
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
    """A listed object's file mtime: its `goog-reserved-file-mtime`, else its creation time
    (what `gcloud storage rsync` uses, googlecloudsdk/command_lib/storage/rsync_command_util.py)."""
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
