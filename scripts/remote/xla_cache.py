"""Runs on the TPU VM: restore the XLA compile cache before `docker run`, save it after ready.

Why: a flex-start node is deleted with its disk, so every new node compiles for ~685 s (seed 000)
unless the JAX persistent cache (`~/.cache/vllm/xla_cache`) comes back from Cloud Storage first.
It is copied to local disk rather than read from `gs://` (docs/compile-cache.md).

Layout under the prefix `gs://BUCKET/xla-cache/KEY/` (components/compile_cache.py):
  GENERATION/...            the cache files, GENERATION = `img-` + the image digest's first 16 hex
  GENERATION/MANIFEST.json  {"files": {path: {"size", "sha256"}}}, written after the files
  LATEST                    the generation the last save wrote, so the fetch can start before
                            the pull has told us the digest
A generation without a manifest is an interrupted save and is not restored; files that do not
match the manifest (corrupt, partial) are dropped and logged. Only the generation of the digest
that is about to run is ever installed.

Commands (each logs to stderr, never fails the start: problems mean a cold start):
  fetch   --prefix P --work W --timeout S [--in-pod]
                                             LATEST's generation into W/staging (runs during
                                             the image pull)
  install --prefix P --work W --dir D --image I --timeout S [--in-pod]
                                             digest -> generation; verify; copy into D, each
                                             file with its saved mtime; write W/result.json
                                             (the readiness result's `cache`). --in-pod: the
                                             image names its digest (the pod status) or there
                                             is none; a pod has no docker to ask
  --in-pod (both): the token fetch also retries 403 and 404 (a GKE metadata server starting)
  off     --work W                           the cache is disabled: say so in W/result.json
  save    --work W [--timeout S]             upload what is new, then MANIFEST, LATEST, and
                                             touch every object's customTime (lifecycle)

Transport: `gcloud storage` where the VM has gcloud, else the Cloud Storage JSON API with a
token from the metadata server, held in memory only (never argv, env or a file). An older
Cloud SDK without `storage rsync` or `storage objects update` refuses the command line itself
(exit status 2, "Invalid choice", googlecloudsdk/calliope/parser_extensions.py): the tool then
uses the JSON API for the rest of the run. The token fetch is retried (bounded): the GKE
metadata server does not answer in a pod's first seconds (GKE docs, Workload Identity
limitations). TPU_VLLM_CACHE_VIA=gcloud|api forces one; GCE_METADATA_HOST and
STORAGE_API_ENDPOINT override the endpoints (tests). Both download many objects at once:
`gcloud storage` on its own (see Gcloud), the JSON API path with a bounded pool of threads,
TPU_VLLM_CACHE_WORKERS of them (default DEFAULT_WORKERS). Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

MANIFEST = "MANIFEST.json"
LATEST = "LATEST"
# JAX's LRU cache keeps `KEY-cache` entries and, with eviction on, `KEY-atime` stamps
# (jax/_src/lru_cache.py); the stamps change on every read, so they are not worth carrying.
SKIP_SUFFIXES = ("-atime", ".tmp", ".lock")
#: JAX's eviction setting (jax/_src/config.py `jax_compilation_cache_max_size`, read from this
#: variable; default -1 = no eviction, and then JAX neither writes nor reads `-atime` stamps).
JAX_MAX_SIZE_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"
#: How long a metadata-server token fetch is retried (connection errors, 5xx; 403/404 in a pod).
TOKEN_RETRY_SECONDS = 60.0
#: gcloud's exit status for a command line it cannot parse (an unknown command or flag).
GCLOUD_USAGE_ERROR = 2
#: Where the project's Cloud Storage JSON API uploads keep a file's mtime, as `gcloud storage`
#: does (googlecloudsdk/command_lib/storage/posix_util.py MTIME_METADATA_KEY), so either
#: transport recognises what the other uploaded.
MTIME_KEY = "goog-reserved-file-mtime"
# A file that changed within this pause may still be growing (a lazy compile after ready).
SETTLE_SECONDS = 1.0
T = TypeVar("T")
DEFAULT_SAVE_TIMEOUT = 1800.0
#: How many objects the JSON API path downloads at once (TPU_VLLM_CACHE_WORKERS overrides it).
#: A restore is a few hundred objects (seed 000: 197 MB for E2B) and each GET pays a round trip
#: before its first byte, so one at a time spends most of the restore waiting. 16 is what
#: `gcloud storage` itself starts for a multi-file transfer on a machine with 4+ CPUs (16
#: processes, googlecloudsdk/command_lib/storage/optimize_parameters_util.py
#: MULTI_FILE_HIGH_CPU_PROCESS_COUNT, each with 4 threads), far below a bucket's initial ~5000
#: reads/s (Cloud Storage docs, request rate guidelines), and cheap here: each worker streams
#: in BLOCK-sized pieces, so memory stays at workers x BLOCK whatever the entry sizes. Against
#: a loopback fake with 30 ms per request (tests/bench_restore_speed.py) 16 gave 10-13x the
#: serial MB/s and 32 only ~20% more than 16, for twice the connections.
DEFAULT_WORKERS = 16
WORKERS_ENV = "TPU_VLLM_CACHE_WORKERS"
MAX_WORKERS = 64
#: The piece a download worker reads and writes at a time (and checks the deadline between).
BLOCK = 1 << 20
#: How often a download logs its progress.
PROGRESS_SECONDS = 10.0
#: The longest a JSON API call waits on a silent server (then the socket times out).
MAX_SOCKET_TIMEOUT = 120.0
#: The shortest socket timeout a download read gets, just before the deadline.
MIN_READ_TIMEOUT = 0.1


def log(message: str) -> None:
    print(f"xla-cache: {message}", file=sys.stderr, flush=True)


def generation_name(image_digest: str) -> str:
    """Same as components/compile_cache.generation_name (a test pins the two together)."""
    hexdigest = image_digest.rsplit(":", 1)[-1].lower()
    if len(hexdigest) < 16 or any(c not in "0123456789abcdef" for c in hexdigest):
        hexdigest = hashlib.sha256(image_digest.encode()).hexdigest()
    return f"img-{hexdigest[:16]}"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: UP017


def read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(root: str, settle: float = 0.0) -> dict[str, str]:
    """{relative path: absolute path} of the cache entries under root.

    JAX writes an entry in place (`cache_path.write_bytes`, jax/_src/lru_cache.py), so with
    `settle` only files whose size and mtime did not change across that pause are taken: a
    file still being written (a lazy compile after ready) waits for the next save.
    """
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(SKIP_SUFFIXES) or name == MANIFEST:
                continue
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = path
    if not settle:
        return found

    def stats() -> dict[str, tuple[int, int]]:
        seen: dict[str, tuple[int, int]] = {}
        for rel, path in found.items():
            try:
                info = os.stat(path)
            except OSError:
                continue
            seen[rel] = (info.st_size, info.st_mtime_ns)
        return seen

    before = stats()
    time.sleep(settle)
    after = stats()
    return {rel: found[rel] for rel in after if before.get(rel) == after[rel]}


def split_gs(url: str) -> tuple[str, str]:
    rest = url[len("gs://") :]
    bucket, _, name = rest.partition("/")
    return bucket, name


class Deadline:
    def __init__(self, seconds: float, started: float | None = None) -> None:
        self.at = (started if started is not None else time.time()) + seconds

    def left(self) -> float:
        return self.at - time.time()

    def check(self, what: str) -> float:
        left = self.left()
        if left <= 0:
            raise TimeoutError(f"{what}: out of time")
        return left


# ---------------------------------------------------------------------------------------------
# transports


class GcloudUnusable(RuntimeError):
    """gcloud refused the command line itself (exit status 2): an older Cloud SDK lacks it."""


class Gcloud:
    """`gcloud storage` with the VM's own identity (its service account, via the metadata).

    Its `rsync` is already parallel: it runs its copy tasks with `parallelizable=True`
    (surface/storage/rsync.py), and task_executor.execute_tasks then uses the parallel
    TaskGraphExecutor with `storage/process_count` processes x `storage/thread_count` threads,
    which, unless set, are 16 x 4 for a multi-file transfer on 4+ CPUs and 2 x 10 below that
    (googlecloudsdk/command_lib/storage/tasks/task_executor.py, task_util.py
    should_use_parallelism, optimize_parameters_util.py detect_and_set_best_config). So this
    class adds no pool of its own.
    """

    name = "gcloud"

    def _run(
        self, args: list[str], deadline: Deadline, what: str
    ) -> subprocess.CompletedProcess[bytes]:
        timeout = deadline.check(what)
        proc = subprocess.Popen(
            ["gcloud", "storage", *args, "--quiet"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TimeoutError(f"{what}: still running after {timeout:.0f}s; stopped") from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if done.returncode == GCLOUD_USAGE_ERROR:
            # calliope's parser error: `self.exit(2)` after "Invalid choice: 'rsync'." or
            # "unrecognized arguments" (googlecloudsdk/calliope/parser_extensions.py).
            raise GcloudUnusable(f"{what}: {self._error(done)}")
        return done

    @staticmethod
    def _error(done: subprocess.CompletedProcess[bytes]) -> str:
        """gcloud's `ERROR: ...` line (a usage error prints suggestions and usage after it)."""
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")]
        return (errors or lines or [f"exit code {done.returncode}"])[-1]

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        done = self._run(["cat", url], deadline, f"read {url}")
        if done.returncode == 0:
            return done.stdout
        text = done.stderr.decode(errors="replace")
        if "matched no objects" in text or "not found" in text.lower() or "404" in text:
            return None
        raise RuntimeError(f"read {url}: {self._error(done)}")

    def write(
        self, url: str, data: bytes, deadline: Deadline, custom_time: str, mtime: int | None = None
    ) -> None:
        del mtime  # `cp` records the temporary file's; only the cache files' (rsync) matter
        with tempfile.NamedTemporaryFile(prefix="xla-cache-", delete=False) as handle:
            handle.write(data)
        try:
            done = self._run(
                ["cp", handle.name, url, f"--custom-time={custom_time}"], deadline, f"write {url}"
            )
        finally:
            os.unlink(handle.name)
        if done.returncode != 0:
            raise RuntimeError(f"write {url}: {self._error(done)}")

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        os.makedirs(dest, exist_ok=True)
        done = self._run(["rsync", "--recursive", url, dest], deadline, f"download {url}")
        if done.returncode != 0:
            raise RuntimeError(f"download {url}: {self._error(done)}")

    def upload(self, src: str, url: str, deadline: Deadline, custom_time: str) -> None:
        exclude = "|".join([r".*" + s.replace(".", r"\.") + "$" for s in SKIP_SUFFIXES])
        done = self._run(
            [
                "rsync",
                "--recursive",
                f"--exclude={exclude}|(^|.*/)\\..*|^{MANIFEST}$",
                f"--custom-time={custom_time}",
                src,
                url,
            ],
            deadline,
            f"upload to {url}",
        )
        if done.returncode != 0:
            raise RuntimeError(f"upload to {url}: {self._error(done)}")

    def touch(self, url: str, deadline: Deadline, custom_time: str) -> None:
        done = self._run(
            ["objects", "update", f"{url}**", f"--custom-time={custom_time}"],
            deadline,
            f"touch {url}",
        )
        if done.returncode != 0:
            raise RuntimeError(f"touch {url}: {self._error(done)}")


class JsonApi:
    """The Cloud Storage JSON API over urllib, for VMs without gcloud.

    Requests follow https://cloud.google.com/storage/docs/json_api/v1/objects (list, get with
    alt=media, multipart insert, patch). What to copy is decided like `gcloud storage rsync`
    (googlecloudsdk/command_lib/storage/rsync_command_util.py): same size and same hash skip.
    """

    name = "api"

    def __init__(self) -> None:
        self.endpoint = os.environ.get("STORAGE_API_ENDPOINT", "https://storage.googleapis.com")
        self.metadata = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
        self.workers = download_workers()
        self._token = ""
        self._expires = 0.0
        # Download workers share the token: one of them renews it, the others wait for it.
        self._token_lock = threading.Lock()

    def _bearer(self, deadline: Deadline) -> str:
        with self._token_lock:
            if time.time() >= self._expires:
                answer = self._fetch_token(deadline)
                self._token = str(answer["access_token"])
                self._expires = time.time() + float(answer.get("expires_in", 300)) - 60
            return f"Bearer {self._token}"

    #: Set from `--in-pod` (main): the GKE metadata server's first-seconds answers include 403
    #: and 404, which a VM's metadata server only gives for good.
    in_pod = False

    def _fetch_token(self, deadline: Deadline) -> dict[str, Any]:
        """The metadata server's token, retried with backoff on connection errors and 5xx, and
        in a pod also on 403 and 404, all within TOKEN_RETRY_SECONDS.

        In a pod's first seconds the GKE metadata server is not ready yet (GKE docs, Workload
        Identity Federation for GKE, limitations, which advise a retry): it refuses connections
        (googleapis/google-auth-library-python#1261, r-lib/gargle#186) or answers 404 Not Found
        (google-auth-library-python#745, where the maintainer names that start-up delay). On a
        VM a 403 or 404 is final (no service account, no scope), so it is not retried there; in
        a pod one that lasts the whole bound means no Workload Identity binding, and the error
        says so.
        """
        bound = Deadline(min(TOKEN_RETRY_SECONDS, max(deadline.left(), 0.0)))
        request = urllib.request.Request(
            f"http://{self.metadata}/computeMetadata/v1/instance/service-accounts/default/token",
            headers={"Metadata-Flavor": "Google"},
        )
        delay = 0.5
        attempt = 0
        while True:
            attempt += 1
            try:
                timeout = max(min(10.0, bound.left()), 1.0)
                with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                    return dict(json.load(response))
            except urllib.error.HTTPError as error:
                if error.code < 500 and not (self.in_pod and error.code in (403, 404)):
                    raise RuntimeError(
                        f"the metadata server refused a token: HTTP {error.code}"
                    ) from None
                problem = f"HTTP {error.code}"
            except (urllib.error.URLError, OSError, ValueError) as error:
                problem = str(getattr(error, "reason", error))
            left = bound.left()
            if left <= 0:
                hint = (
                    "; lasting this long, the pod's Kubernetes service account is likely not "
                    "bound to a Google service account (Workload Identity)"
                    if problem in ("HTTP 403", "HTTP 404")
                    else ""
                )
                raise RuntimeError(
                    f"no token from the metadata server after {attempt} attempts ({problem}){hint}"
                )
            log(
                f"the metadata server gave no token yet ({problem}); retrying in "
                f"{min(delay, left):.1f}s (attempt {attempt}, for up to {TOKEN_RETRY_SECONDS:.0f}s)"
            )
            time.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)

    def _call(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        with self._open(method, path, deadline, body, headers) as response:
            return bytes(response.read())

    def _open(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The response, to read from (a `with` closes it). The socket timeout is what is left
        of the deadline (at most MAX_SOCKET_TIMEOUT), so a stalled server cannot hold a call
        past it; it holds for each later read too, which a download re-aims at the deadline
        before each of its reads (`_download_one`)."""
        timeout = min(deadline.check(f"{method} {path}"), MAX_SOCKET_TIMEOUT)
        request = urllib.request.Request(  # noqa: S310 - https endpoint (loopback in tests)
            self.endpoint.rstrip("/") + path,
            data=body,
            method=method,
            headers={"Authorization": self._bearer(deadline), **(headers or {})},
        )
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310

    @staticmethod
    def _object_path(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"

    def _list(self, url: str, deadline: Deadline) -> dict[str, dict[str, Any]]:
        bucket, prefix = split_gs(url)
        found: dict[str, dict[str, Any]] = {}
        token = ""
        while True:
            query = {
                "prefix": prefix,
                "fields": "items(name,size,md5Hash,metadata,timeCreated),nextPageToken",
            }
            if token:
                query["pageToken"] = token
            page = json.loads(
                self._call(
                    "GET", f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}", deadline
                )
            )
            for item in page.get("items", []):
                found[str(item["name"])[len(prefix) :]] = item
            token = str(page.get("nextPageToken") or "")
            if not token:
                return found

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        bucket, name = split_gs(url)
        try:
            return self._call("GET", self._object_path(bucket, name) + "?alt=media", deadline)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise RuntimeError(f"read {url}: HTTP {error.code}") from None

    def write(
        self, url: str, data: bytes, deadline: Deadline, custom_time: str, mtime: int | None = None
    ) -> None:
        bucket, name = split_gs(url)
        boundary = uuid.uuid4().hex
        fields: dict[str, Any] = {"name": name, "customTime": custom_time}
        if mtime is not None:
            fields["metadata"] = {MTIME_KEY: str(mtime)}
        meta = json.dumps(fields).encode()
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                meta,
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        try:
            self._call(
                "POST",
                f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart",
                deadline,
                body,
                {"Content-Type": f"multipart/related; boundary={boundary}"},
            )
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"write {url}: HTTP {error.code}") from None

    @staticmethod
    def _same(item: dict[str, Any], path: str) -> bool:
        try:
            if int(item.get("size", -1)) != os.path.getsize(path):
                return False
        except OSError:
            return False
        md5 = hashlib.md5()  # noqa: S324 - GCS's own checksum, not security
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                md5.update(block)
        return base64.b64encode(md5.digest()).decode() == item.get("md5Hash")

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        """Every object under `url` into `dest`, `self.workers` at a time.

        As before the pool: an object already there with the same size and MD5 is kept; each
        file gets the object's saved mtime; the first object that fails (an HTTP error, a
        short body, the deadline) fails the whole download, the objects not started yet are not
        started, and the ones running are stopped (`Stop`). It returns or raises only once no
        worker runs any more, so the caller's time (`fetch.json`'s `seconds`) is all of it; a
        worker waiting on the server stops at the deadline (each read's socket timeout is aimed
        at it) or at once when stopped, not up to MAX_SOCKET_TIMEOUT later.
        Each file appears only whole: written as `.part`, its length checked against the
        answer's Content-Length (else the listed size), then renamed; whether its bytes are the
        saved ones is the manifest check's business (`verify`), which drops what does not match.
        """
        bucket, prefix = split_gs(url)
        listing = self._list(url, deadline)
        if not listing:
            raise RuntimeError(f"download {url}: Did not find existing container at: {url}")
        # Largest first: with a pool, a big entry started last would finish alone at the end.
        order = sorted(listing.items(), key=lambda kv: (-_size(kv[1]), kv[0]))
        progress = Progress(url, len(order), sum(_size(item) for _, item in order))
        workers = max(1, min(self.workers, len(order)))
        log(
            f"downloading {len(order)} objects ({progress.total_bytes / 1e6:.1f} MB) from {url} "
            f"via the JSON API, {workers} at a time"
        )
        stop = Stop()
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xla-cache-get")
        one = functools.partial(
            self._download_one, bucket=bucket, prefix=prefix, dest=dest, deadline=deadline,
            stop=stop, progress=progress,
        )  # fmt: skip
        futures = [pool.submit(one, rel, item) for rel, item in order]
        pending: set[Future[None]] = set(futures)
        try:
            while pending:
                wait_for = max(min(PROGRESS_SECONDS, deadline.left()), 0.0)
                done, pending = wait(pending, timeout=wait_for, return_when=FIRST_EXCEPTION)
                for future in futures:  # the first failure, in submission order
                    if future in done and future.exception() is not None:
                        future.result()
                if pending:
                    deadline.check(f"download {url}")
                    progress.log_now()
        except BaseException:
            stop.set()  # the running workers' sockets are shut down: they wake at once
            pool.shutdown(wait=False, cancel_futures=True)
            # Wait for the running workers to end: nothing is still written into `dest` once
            # the caller moves on, and the caller's time counts theirs. Each is bounded by the
            # deadline (every socket timeout is aimed at it), and a stopped one ends at its
            # next read. (A cancelled future never counts as done for `wait`: leave those out.)
            wait([future for future in pending if not future.cancelled()])
            raise
        pool.shutdown(wait=True)
        progress.log_now(final=True)

    def _download_one(
        self,
        rel: str,
        item: dict[str, Any],
        *,
        bucket: str,
        prefix: str,
        dest: str,
        deadline: Deadline,
        stop: Stop,
        progress: Progress,
    ) -> None:
        """One object into `dest/rel` (a pool worker)."""
        if stop.is_set():
            return
        target = os.path.join(dest, rel)
        if os.path.exists(target) and self._same(item, target):
            progress.done(_size(item), kept=True)
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = target + ".part"
        what = f"download gs://{bucket}/{prefix}{rel}"
        try:
            with self._open("GET", self._object_path(bucket, prefix + rel) + "?alt=media",
                            deadline) as response, open(part, "wb") as handle:  # fmt: skip
                expected = expected_bytes(response, item)
                received = 0
                sock = response_socket(response)
                # read1: at most one socket read per block, so a server that trickles bytes
                # meets the deadline check below instead of holding a whole block's read.
                read = getattr(response, "read1", response.read)
                with stop.watching(sock):
                    while True:
                        if stop.is_set():
                            raise RuntimeError(f"{what}: stopped (another download failed)")
                        left = deadline.check(what)
                        if sock is not None:
                            # The timeout urlopen set holds for every read from then on: a
                            # body that trickles, then stalls, would hold this worker up to
                            # that long past the deadline. Aim each read at the deadline.
                            with contextlib.suppress(OSError):
                                sock.settimeout(
                                    max(MIN_READ_TIMEOUT, min(left, MAX_SOCKET_TIMEOUT))
                                )
                        block = read(BLOCK)
                        if not block:
                            break
                        handle.write(block)
                        received += len(block)
                        progress.add(len(block))
            if stop.is_set():
                raise RuntimeError(f"{what}: stopped (another download failed)")
            # http.client's read1 (and read(n)) return b"" when the connection closes early,
            # with no IncompleteRead (CPython Lib/http/client.py HTTPResponse.read1): the
            # length is the only sign of a body cut short.
            if expected is not None and received < expected:
                raise RuntimeError(f"{what}: short read {received} of {expected} bytes")
            mtime = object_mtime(item)
            if mtime is not None:  # as `gcloud storage rsync` does for a download
                os.utime(part, (mtime, mtime))
            os.replace(part, target)
        except urllib.error.HTTPError as error:
            _unlink(part)
            raise RuntimeError(f"{what}: HTTP {error.code}") from None
        except BaseException:
            _unlink(part)
            raise
        progress.done(0)

    def upload(self, src: str, url: str, deadline: Deadline, custom_time: str) -> None:
        remote = self._list(url, deadline)
        for rel, path in sorted(local_files(src).items()):
            if rel in remote and self._same(remote[rel], path):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            self.write(url + rel, data, deadline, custom_time, int(os.path.getmtime(path)))

    def touch(self, url: str, deadline: Deadline, custom_time: str) -> None:
        bucket, prefix = split_gs(url)
        body = json.dumps({"customTime": custom_time}).encode()
        for rel in self._list(url, deadline):
            try:
                self._call(
                    "PATCH",
                    self._object_path(bucket, prefix + rel),
                    deadline,
                    body,
                    {"Content-Type": "application/json"},
                )
            except urllib.error.HTTPError as error:
                raise RuntimeError(f"touch {url}{rel}: HTTP {error.code}") from None


class Stop:
    """A download's stop signal, set by the caller's thread when it abandons the download (a
    failed object, the deadline). The workers check it between reads; `set` also shuts down
    the socket each one is reading from, so a worker waiting on a silent server wakes at once
    (its read returns end-of-stream) instead of at its socket timeout."""

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


def _size(item: dict[str, Any]) -> int:
    try:
        return int(item.get("size", 0))
    except (TypeError, ValueError):
        return 0


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def download_workers() -> int:
    """The JSON API download pool's size: TPU_VLLM_CACHE_WORKERS, else DEFAULT_WORKERS."""
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
            f"downloading {DEFAULT_WORKERS} objects at a time"
        )
        return DEFAULT_WORKERS
    return workers


class Progress:
    """A download's objects and bytes, counted by its workers and logged by the caller's
    thread (one line every PROGRESS_SECONDS, and a last one with the rate)."""

    def __init__(self, url: str, objects: int, total_bytes: int) -> None:
        self.url = url
        self.objects = objects
        self.total_bytes = total_bytes
        self.finished = 0
        self.kept = 0
        self.received = 0
        self.kept_bytes = 0
        self.started = time.time()
        self._logged = self.started
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.received += nbytes

    def done(self, nbytes: int, kept: bool = False) -> None:
        with self._lock:
            self.finished += 1
            if kept:
                self.kept += 1
                self.kept_bytes += nbytes

    def log_now(self, final: bool = False) -> None:
        now = time.time()
        if not final and now - self._logged < PROGRESS_SECONDS:
            return
        self._logged = now
        with self._lock:
            finished, kept, received = self.finished, self.kept, self.received
            needed = self.total_bytes - self.kept_bytes
        seconds = max(now - self.started, 1e-6)
        rate = f"{received / 1e6 / seconds:.1f} MB/s"
        already = f"; {kept} already there" if kept else ""
        if final:
            log(
                f"downloaded {finished - kept} objects ({received / 1e6:.1f} MB) from "
                f"{self.url} in {seconds:.1f}s, {rate}{already}"
            )
        else:
            log(
                f"downloading: {finished} of {self.objects} objects, "
                f"{received / 1e6:.1f} of {needed / 1e6:.1f} MB after {seconds:.0f}s, "
                f"{rate}{already}"
            )


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


class GcloudThenApi:
    """`gcloud storage`, until it refuses a command line (an older Cloud SDK): from then on, for
    the rest of this run, the JSON API. A real failure (network, permission) is not retried."""

    def __init__(self) -> None:
        self.gcloud = Gcloud()
        self.api: JsonApi | None = None

    @property
    def name(self) -> str:
        return "api (gcloud storage unusable)" if self.api else "gcloud"

    def _fallback(self, error: GcloudUnusable) -> JsonApi:
        if self.api is None:
            log(
                f"gcloud storage cannot run this here ({error}): an older Cloud SDK; "
                "using the Cloud Storage JSON API for the rest of this run"
            )
            self.api = JsonApi()
        return self.api

    def _use(self, call: Callable[[Gcloud | JsonApi], T]) -> T:
        if self.api is None:
            try:
                return call(self.gcloud)
            except GcloudUnusable as error:
                self._fallback(error)
        assert self.api is not None
        return call(self.api)

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        return self._use(lambda store: store.read(url, deadline))

    def write(
        self, url: str, data: bytes, deadline: Deadline, custom_time: str, mtime: int | None = None
    ) -> None:
        self._use(lambda store: store.write(url, data, deadline, custom_time, mtime))

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        self._use(lambda store: store.download(url, dest, deadline))

    def upload(self, src: str, url: str, deadline: Deadline, custom_time: str) -> None:
        self._use(lambda store: store.upload(src, url, deadline, custom_time))

    def touch(self, url: str, deadline: Deadline, custom_time: str) -> None:
        self._use(lambda store: store.touch(url, deadline, custom_time))


_STORES: dict[str, Gcloud | JsonApi | GcloudThenApi] = {}


def transport() -> Gcloud | JsonApi | GcloudThenApi:
    """One store per run (a fallback, once taken, holds for the run's later calls)."""
    via = os.environ.get("TPU_VLLM_CACHE_VIA", "auto")
    if via not in _STORES:
        if via == "gcloud":
            _STORES[via] = Gcloud()
        elif via == "api" or not shutil.which("gcloud"):
            _STORES[via] = JsonApi()
        else:
            _STORES[via] = GcloudThenApi()
    return _STORES[via]


# ---------------------------------------------------------------------------------------------
# restore


def paths(work: str) -> dict[str, str]:
    return {
        "fetch": os.path.join(work, "fetch.json"),
        "state": os.path.join(work, "state.json"),
        "result": os.path.join(work, "result.json"),
        "staging": os.path.join(work, "staging"),
    }


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download the newest generation (LATEST) while the image is still being pulled."""
    p = paths(args.work)
    started = time.time()
    record: dict[str, Any] = {"started": started, "prefix": args.prefix, "candidate": ""}
    write_json(p["fetch"], record)
    deadline = Deadline(args.timeout, started)
    store = transport()
    try:
        raw = store.read(args.prefix + LATEST, deadline)
        if raw is None:
            record["error"] = "no cache saved under this key yet"
            log(f"no generation under {args.prefix} yet (first start with this key)")
        else:
            candidate = raw.decode(errors="replace").strip()
            record["candidate"] = candidate
            log(f"fetching {args.prefix}{candidate}/ via {store.name}")
            store.download(
                f"{args.prefix}{candidate}/", os.path.join(p["staging"], candidate), deadline
            )
            record["fetched"] = True
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        record["error"] = str(error)
        log(f"fetch failed ({error}); the start goes on")
    # The fetch's own time: the restore's share of the budget (the pull runs alongside).
    record["seconds"] = round(time.time() - started, 3)
    write_json(p["fetch"], record)
    return 0


class Image:
    """What the restore needs to know about the image about to run."""

    def __init__(self, digest: str, env: dict[str, str]) -> None:
        self.digest = digest  # "" when unknown
        self.env = env  # its environment (ENV), where JAX reads its settings from


def inspect_image(image: str, in_pod: bool) -> Image:
    """The image's registry digest (`repo@sha256:...`, else its local id) and environment.

    On a VM: `sudo docker image inspect` (RepoDigests, Config.Env). In a pod there is no docker
    (never call it there): the init container runs in the server's image, so its own
    environment is the image's, and the digest is the one the kubelet published in the pod's
    status (`imageID`, scripts/remote/pod_image.py), passed as `--image`, or none at all.
    """
    if in_pod:
        return Image(image if "@sha256:" in image else "", dict(os.environ))
    done = subprocess.run(
        ["sudo", "docker", "image", "inspect", image],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        return Image(image if "@sha256:" in image else "", {})
    try:
        data = json.loads(done.stdout)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        data = {}
    env = dict(
        str(e).split("=", 1) for e in (data.get("Config") or {}).get("Env") or [] if "=" in str(e)
    )
    if "@sha256:" in image:
        return Image(image, env)
    digests = [str(d) for d in data.get("RepoDigests") or []]
    return Image(sorted(digests)[0] if digests else str(data.get("Id") or ""), env)


def eviction_configured(env: dict[str, str]) -> bool:
    """JAX evicts (and keeps `-atime` stamps) only when its max size is not -1, the default
    (jax/_src/compilation_cache.py `get_file_cache` -> LRUCache `eviction_enabled`)."""
    return env.get(JAX_MAX_SIZE_ENV, "-1").strip() not in ("", "-1")


def verify(staging: str) -> tuple[dict[str, int], int, str]:
    """({path: size} of entries that match the manifest, entries dropped, problem or "")."""
    manifest = read_json(os.path.join(staging, MANIFEST)).get("files")
    if not isinstance(manifest, dict):
        return {}, 0, "the generation has no manifest (an interrupted save?)"
    good: dict[str, int] = {}
    dropped = 0
    for rel, entry in sorted(manifest.items()):
        path = os.path.join(staging, rel)
        try:
            ok = (
                os.path.getsize(path) == int(entry["size"]) and file_sha256(path) == entry["sha256"]
            )
        except (OSError, KeyError, TypeError, ValueError):
            ok = False
        if ok:
            good[rel] = int(entry["size"])
        else:
            dropped += 1
            with_path = os.path.exists(path)
            log(f"dropping {rel}: {'does not match the manifest' if with_path else 'missing'}")
            if with_path:
                os.unlink(path)  # fetched again next time
    return good, dropped, ""


def install(
    staging: str, good: dict[str, int], target: str, stamps: bool = False
) -> tuple[int, int]:
    """Copy verified entries into the cache directory; (files, bytes) now in place.

    Each file keeps the mtime it was saved with (the download set it): the next save's
    `gcloud storage rsync` compares size and mtime, and would otherwise send every restored
    file again (googlecloudsdk/command_lib/storage/rsync_command_util.py).
    With `stamps` (JAX eviction on), each `KEY-cache` also gets a `KEY-atime` stamp (8 bytes,
    little-endian ns): JAX's eviction reads one for every entry and fails on a missing one
    (jax/_src/lru_cache.py). Without eviction JAX never reads or writes them.
    """
    files = size = 0
    stamp = time.time_ns().to_bytes(8, "little")
    for rel, nbytes in good.items():
        src, dest = os.path.join(staging, rel), os.path.join(target, rel)
        kept = os.stat(src)
        try:
            there = os.stat(dest)
            same = there.st_size == nbytes and there.st_mtime_ns == kept.st_mtime_ns
        except OSError:
            same = False
        if not same:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(src, dest + ".restore.tmp")
            os.utime(dest + ".restore.tmp", ns=(kept.st_atime_ns, kept.st_mtime_ns))
            os.replace(dest + ".restore.tmp", dest)
        atime = dest[: -len("-cache")] + "-atime"
        if stamps and rel.endswith("-cache") and not os.path.exists(atime):
            with open(atime + ".restore.tmp", "wb") as handle:
                handle.write(stamp)
            os.replace(atime + ".restore.tmp", atime)
        files += 1
        size += nbytes
    return files, size


def unwritable(target: str) -> str:
    """Why the install could not write into `target` ("" when it can)."""
    folder = target
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.access(folder, os.W_OK | os.X_OK):
        return ""
    owner = os.stat(folder).st_uid
    return (
        f"cannot write to {folder} (owned by uid {owner}, this is uid {os.getuid()}): the "
        "server runs as root and JAX creates the directory itself; the start script hands it "
        "back with `sudo chown` first"
    )


def cmd_install(args: argparse.Namespace) -> int:
    """After the pull: keep the fetched generation only if it matches the image; install it.

    The restore's time (its bound and the result's `seconds`) is the fetch's own time plus this
    step's, not the image pull the fetch ran alongside: a slow pull neither eats the restore's
    budget nor shows up as restore overhead.
    """
    p = paths(args.work)
    fetched = read_json(p["fetch"])
    began = time.time()
    if "seconds" in fetched:
        fetch_seconds = float(fetched["seconds"])
    else:  # no fetch ran, or it died: count from its start, if any, to stay bounded
        fetch_seconds = began - float(fetched.get("started") or began)
    deadline = Deadline(max(args.timeout - fetch_seconds, 0.0), began)
    result: dict[str, Any] = {"restored": False, "files": 0, "bytes": 0, "generation": ""}
    target = os.path.expanduser(args.dir)
    # What the save uploads, and where, is this start's only: a previous start's state on the
    # same VM (another key or image) must not survive a failure below to misdirect the save.
    write_json(p["state"], {})
    in_pod = bool(args.in_pod)
    try:
        image = inspect_image(args.image, in_pod)
        digest = image.digest
        if not digest and in_pod:
            raise RuntimeError(
                f"no image digest for {args.image}: the pod status named none (the kubelet "
                "publishes imageID asynchronously; pod-image's log says how long it waited); "
                "a pod has no docker to ask"
            )
        if not digest:
            raise RuntimeError(f"cannot resolve the digest of {args.image}")
        generation = generation_name(digest)
        url = f"{args.prefix}{generation}/"
        result["generation"] = url
        write_json(
            p["state"],
            {"prefix": args.prefix, "generation": generation, "dir": target, "digest": digest},
        )
        staging = os.path.join(p["staging"], generation)
        for old in os.listdir(p["staging"]) if os.path.isdir(p["staging"]) else []:
            if old != generation:
                shutil.rmtree(os.path.join(p["staging"], old), ignore_errors=True)
        candidate = str(fetched.get("candidate") or "")
        if candidate != generation or not fetched.get("fetched"):
            if candidate and candidate != generation:
                log(
                    f"the newest generation ({candidate}) was made with another image; "
                    f"not using it. Looking for {generation} ({digest})"
                )
            if store_has_generation(url, deadline):
                transport().download(url, staging, deadline)
            else:
                result["reason"] = f"no cache for this image under {args.prefix} yet"
        if "reason" not in result:
            good, dropped, problem = verify(staging)
            if problem:
                result["reason"] = problem
                shutil.rmtree(staging, ignore_errors=True)
            elif not good:
                result["reason"] = f"all {dropped} entries were corrupt or missing"
            elif unwritable(target):
                result["reason"] = unwritable(target)
            else:
                os.makedirs(target, exist_ok=True)
                files, size = install(staging, good, target, eviction_configured(image.env))
                result.update(restored=True, files=files, bytes=size)
                if dropped:
                    result["reason"] = f"{dropped} corrupt or missing entries dropped"
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        result["reason"] = f"restore failed: {error}"
    result["seconds"] = round(fetch_seconds + time.time() - began, 1)
    if result["restored"]:
        log(
            f"restored {result['files']} files ({result['bytes']} bytes) from "
            f"{result['generation']} in {result['seconds']}s"
            + (f"; {result['reason']}" if result.get("reason") else "")
        )
    else:
        log(f"not restored ({result.get('reason', '')}); this start compiles cold")
    write_json(p["result"], result)
    return 0


def store_has_generation(url: str, deadline: Deadline) -> bool:
    return transport().read(url + MANIFEST, deadline) is not None


def cmd_off(args: argparse.Namespace) -> int:
    p = paths(args.work)
    write_json(p["state"], {})
    write_json(
        p["result"],
        {"restored": False, "files": 0, "bytes": 0, "seconds": 0.0, "generation": "",
         "reason": "disabled (tpu-vllm:cache.enabled is false)"},
    )  # fmt: skip
    return 0


# ---------------------------------------------------------------------------------------------
# save


def cmd_save(args: argparse.Namespace) -> int:
    """Upload what is new, then the manifest, LATEST, and mark the generation as used."""
    p = paths(args.work)
    state = read_json(p["state"])
    if not state.get("generation"):
        log("nothing to save (the cache is off, or the restore never learned the image digest)")
        return 0
    started = time.time()
    deadline = Deadline(args.timeout, started)
    url = f"{state['prefix']}{state['generation']}/"
    store = transport()
    try:
        entries: dict[str, dict[str, Any]] = {
            rel: {"size": os.path.getsize(path), "sha256": file_sha256(path)}
            for rel, path in local_files(state["dir"], SETTLE_SECONDS).items()
        }
        raw = store.read(url + MANIFEST, deadline)
        remote = json.loads(raw).get("files", {}) if raw else {}
        new = {rel: e for rel, e in entries.items() if remote.get(rel) != e}
        stamp = now_rfc3339()
        if new:
            log(f"saving {len(new)} new files to {url} via {store.name}")
            store.upload(state["dir"], url, deadline, stamp)
            merged = {**remote, **entries}
            store.write(
                url + MANIFEST, json.dumps({"files": merged}, sort_keys=True).encode(), deadline,
                stamp,
            )  # fmt: skip
        elif not entries:
            log(f"the cache directory {state['dir']} is empty; nothing to save")
            return 0
        store.write(state["prefix"] + LATEST, state["generation"].encode(), deadline, stamp)
        store.touch(url, deadline, stamp)
        summary: dict[str, Any] = {
            "ok": True,
            "uploaded": len(new),
            "bytes": sum(int(e["size"]) for e in new.values()),
            "seconds": round(time.time() - started, 1),
            "generation": url,
        }
        log(f"saved: {json.dumps(summary, sort_keys=True)}")
    except Exception as error:  # noqa: BLE001 - the server serves either way
        summary = {"ok": False, "error": str(error), "generation": url}
        log(f"save FAILED ({error}); the server is unaffected, the next node starts cold")
    write_json(os.path.join(args.work, "save.json"), summary)
    return 0 if summary["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xla_cache.py")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch")
    install_ = sub.add_parser("install")
    off = sub.add_parser("off")
    save = sub.add_parser("save")
    for each in (fetch, install_, off, save):
        each.add_argument("--work", required=True)
    for each in (fetch, install_):
        each.add_argument("--prefix", required=True)
        each.add_argument("--timeout", type=float, required=True)
        each.add_argument("--in-pod", action="store_true")
    install_.add_argument("--dir", required=True)
    install_.add_argument("--image", required=True)
    save.add_argument("--timeout", type=float, default=DEFAULT_SAVE_TIMEOUT)
    args = parser.parse_args(argv)
    JsonApi.in_pod = bool(getattr(args, "in_pod", False))
    args.work = os.path.expanduser(args.work)
    os.makedirs(args.work, exist_ok=True)
    handler = {"fetch": cmd_fetch, "install": cmd_install, "off": cmd_off, "save": cmd_save}
    return handler[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
