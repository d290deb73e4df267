"""The Cloud Storage JSON API over urllib, with a metadata-server token (scripts/remote/
xla_cache.py).

Requests follow https://cloud.google.com/storage/docs/json_api/v1/objects: list, get (the
Object resource, or its bytes with alt=media), multipart insert, patch. Every write may carry
`ifGenerationMatch` (Request preconditions, https://cloud.google.com/storage/docs/request-
preconditions): the write happens only if the object's live generation is that number, `0`
meaning "no live object"; otherwise the service answers 412 Precondition Failed and writes
nothing, which `write` raises as `PreconditionFailed`. `read_generation` returns an object with
the generation it read (objects.get, then alt=media with `ifGenerationMatch` of that number),
so a read-modify-write can be made conditional on nothing having changed since.
Transient failures (408, 429, 5xx, a reset or timed-out connection) are tried again with
backoff (xla_cache_retry says when and how long): every read, and a write only when it carries
`ifGenerationMatch`; two writes of one object name are kept a second apart. Files over
RESUMABLE_BYTES go up as resumable uploads (xla_cache_resumable).
The token is held in memory only (never argv, env or a file).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

from xla_cache_base import (
    BLOCK,
    MTIME_KEY,
    Deadline,
    file_digests,
    log,
    rfc3339_seconds,
    split_gs,
)
from xla_cache_pool import (
    Progress,
    Stop,
    expected_bytes,
    object_mtime,
    pool_workers,
    response_socket,
    run_pool,
    size_of,
    unlink_quietly,
)
from xla_cache_resumable import RESUMABLE_BYTES, ResumableUpload
from xla_cache_retry import BodyCutShort, Policy, WriteSpacing, retryable

#: How long a metadata-server token fetch is retried (connection errors, 5xx; 403/404 in a pod).
TOKEN_RETRY_SECONDS = 60.0
#: The longest a JSON API call waits on a silent server (then the socket times out).
MAX_SOCKET_TIMEOUT = 120.0
#: The shortest socket timeout a transfer read gets, just before the deadline.
MIN_READ_TIMEOUT = 0.1
#: The Object fields the tool reads from a listing.
LIST_FIELDS = "items(name,size,md5Hash,metadata,timeCreated,generation,customTime),nextPageToken"


class PreconditionFailed(RuntimeError):
    """412: the object's generation was not the one the write (or read) was conditional on."""


class JsonApi:
    """The Cloud Storage JSON API for the VM's (or the pod's Workload Identity) identity."""

    name = "api"
    #: Set from `--in-pod` (main): the GKE metadata server's first-seconds answers include 403
    #: and 404, which a VM's metadata server only gives for good.
    in_pod = False

    def __init__(self) -> None:
        self.endpoint = os.environ.get("STORAGE_API_ENDPOINT", "https://storage.googleapis.com")
        self.metadata = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
        self.workers = pool_workers()
        self._token = ""
        self._expires = 0.0
        # Pool workers share the token: one of them renews it, the others wait for it.
        self._token_lock = threading.Lock()
        self.retry = Policy()
        self.spacing = WriteSpacing()

    # -- identity -------------------------------------------------------------------------
    def _bearer(self, deadline: Deadline) -> str:
        with self._token_lock:
            if time.time() >= self._expires:
                answer = self._fetch_token(deadline)
                self._token = str(answer["access_token"])
                self._expires = time.time() + float(answer.get("expires_in", 300)) - 60
            return f"Bearer {self._token}"

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

    # -- requests ---------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        with self._open(method, path, deadline, body, headers) as response:
            return bytes(response.read())

    def _open(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The response, to read from (a `with` closes it). The socket timeout is what is left
        of the deadline (at most MAX_SOCKET_TIMEOUT), so a stalled server cannot hold a call
        past it; it holds for each later read too, which a download re-aims at the deadline
        before each of its reads (`_download_one`). `body` may be an iterable of bytes (with a
        Content-Length header): http.client sends it piece by piece (Lib/http/client.py
        `_send_output`), so an upload never holds a whole file in memory."""
        return self.open_url(method, self.endpoint.rstrip("/") + path, deadline, body, headers)

    def open_url(
        self,
        method: str,
        url: str,
        deadline: Deadline,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """`_open` of a whole URL (a resumable upload's session URI, on the endpoint)."""
        # The path only: a resumable session's URI carries `upload_id`, which acts as a
        # credential for the upload (Cloud Storage docs, "Resumable uploads"), and a deadline
        # message is logged.
        timeout = min(deadline.check(f"{method} {url.split('?', 1)[0]}"), MAX_SOCKET_TIMEOUT)
        request = urllib.request.Request(  # noqa: S310 - https endpoint (loopback in tests)
            url,
            data=body,
            method=method,
            headers={"Authorization": self._bearer(deadline), **(headers or {})},
        )
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310

    def _get(self, path: str, deadline: Deadline, what: str) -> bytes:
        """A GET's body, tried again on a transient failure (reads are idempotent)."""
        return self.retry.run(lambda: self._call("GET", path, deadline), what, deadline)

    @staticmethod
    def _object_path(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"

    def list(self, url: str, deadline: Deadline) -> dict[str, dict[str, Any]]:
        """{name under `url`: Object resource} of every object under `url` (all pages)."""
        bucket, prefix = split_gs(url)
        found: dict[str, dict[str, Any]] = {}
        token = ""
        while True:
            query = {"prefix": prefix, "fields": LIST_FIELDS}
            if token:
                query["pageToken"] = token
            path = f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}"
            page = json.loads(self._get(path, deadline, f"list {url}"))
            for item in page.get("items", []):
                found[str(item["name"])[len(prefix) :]] = item
            token = str(page.get("nextPageToken") or "")
            if not token:
                return found

    def stat(self, url: str, deadline: Deadline) -> dict[str, Any] | None:
        """The object's resource (objects.get without alt=media), or None if there is none."""
        bucket, name = split_gs(url)
        try:
            return dict(json.loads(self._get(self._object_path(bucket, name), deadline, url)))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise RuntimeError(f"stat {url}: HTTP {error.code}") from None

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        bucket, name = split_gs(url)
        try:
            return self._get(self._object_path(bucket, name) + "?alt=media", deadline, url)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise RuntimeError(f"read {url}: HTTP {error.code}") from None

    def read_generation(self, url: str, deadline: Deadline) -> tuple[bytes | None, int]:
        """(the object's bytes, the generation they are) or (None, 0) when there is none: the
        generation a conditional rewrite of it passes as `ifGenerationMatch` (0: "must not
        exist"). The bytes are read with `ifGenerationMatch` of the generation just listed, so
        they are that generation's; a write in between (412, or 404 if it was deleted) makes
        it read both again."""
        bucket, name = split_gs(url)
        while True:
            item = self.stat(url, deadline)
            if item is None:
                return None, 0
            generation = int(item["generation"])
            query = urllib.parse.urlencode({"alt": "media", "ifGenerationMatch": generation})
            try:
                path = f"{self._object_path(bucket, name)}?{query}"
                return self._get(path, deadline, url), generation
            except urllib.error.HTTPError as error:
                if error.code not in (404, 412):
                    raise RuntimeError(f"read {url}: HTTP {error.code}") from None
            deadline.check(f"read {url}")

    def write(
        self,
        url: str,
        data: bytes | str,
        deadline: Deadline,
        custom_time: str,
        mtime: int | None = None,
        *,
        if_generation_match: int | None = None,
        progress: Progress | None = None,
        stop: Stop | None = None,
    ) -> dict[str, Any]:
        """Write `data` (bytes, or the path of a file, streamed in BLOCK pieces) as the object
        `url`; its resource. A multipart insert carries the custom time and the mtime with the
        bytes (a media upload, `uploadType=media`, takes only the name); a file over
        RESUMABLE_BYTES goes up resumably, its metadata in the session's first request.
        Raises PreconditionFailed on 412, nothing written.

        Tried again on a transient failure only with `if_generation_match` (it can land at most
        once); each attempt waits until a second has passed since this tool last wrote the name
        (`WriteSpacing`). A 412 after an attempt whose outcome is unknown (a 5xx, a reset, a
        timeout: the service may have written the object and lost only its answer) is that
        attempt's own write if, and only if, the live object holds exactly these bytes (size
        and MD5); then the write succeeded. Otherwise another writer won, as on a first try.
        Taking every such 412 for success would not be sound: another save's manifest, say,
        would be kept as if it were this one's merge."""
        bucket, name = split_gs(url)
        fields: dict[str, Any] = {"name": name, "customTime": custom_time}
        if mtime is not None:
            fields["metadata"] = {MTIME_KEY: str(mtime)}
        size = len(data) if isinstance(data, bytes) else os.path.getsize(data)
        query: dict[str, Any] = {}
        if if_generation_match is not None:
            query["ifGenerationMatch"] = if_generation_match
        what = f"write {url}"
        resumable = (
            ResumableUpload(
                self, bucket, fields, data, size=size, query=query, progress=progress, stop=stop
            )
            if isinstance(data, str) and size > RESUMABLE_BYTES
            else None
        )
        unknown = False  # an earlier attempt may have written the object

        def attempt() -> dict[str, Any]:
            nonlocal unknown
            self.spacing.wait(url, deadline)
            try:
                if resumable is not None:
                    return resumable.attempt(deadline)
                return self._multipart(
                    bucket, fields, data, size=size, query=query, deadline=deadline,
                    progress=progress, stop=stop,
                )  # fmt: skip
            except Exception as error:
                unknown = unknown or retryable(error)
                raise
            finally:
                self.spacing.wrote(url)

        try:
            return self.retry.run(
                attempt, what, deadline, retry=if_generation_match is not None,
                stopped=lambda: stop is not None and stop.is_set(),
            )  # fmt: skip
        except urllib.error.HTTPError as error:
            if error.code != 412:
                raise RuntimeError(f"{what}: HTTP {error.code}") from None
        landed = self._holds(url, data, deadline) if unknown else None
        if landed is not None:
            log(f"{what}: 412 on a retry, and the object holds these bytes: the earlier try landed")
            return landed
        raise PreconditionFailed(
            f"{what}: 412 Precondition Failed (ifGenerationMatch={if_generation_match})"
        )

    def _holds(self, url: str, data: bytes | str, deadline: Deadline) -> dict[str, Any] | None:
        """The live object's resource if it holds exactly `data` (size and MD5), else None."""
        item = self.stat(url, deadline)
        if item is None:
            return None
        if isinstance(data, bytes):
            size = len(data)
            md5 = base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324
        else:
            size, _sha, md5 = file_digests(data)
        same = str(item.get("size")) == str(size) and item.get("md5Hash") == md5
        return item if same else None

    def _multipart(
        self,
        bucket: str,
        fields: dict[str, Any],
        data: bytes | str,
        *,
        size: int,
        query: dict[str, Any],
        deadline: Deadline,
        progress: Progress | None,
        stop: Stop | None,
    ) -> dict[str, Any]:
        """One multipart insert (metadata and bytes in one request); its resource."""
        boundary = uuid.uuid4().hex
        head = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps(fields).encode(),
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            ]
        )
        tail = f"\r\n--{boundary}--\r\n".encode()
        what = f"write gs://{bucket}/{fields['name']}"

        def body() -> Iterator[bytes]:
            yield head
            if isinstance(data, bytes):
                yield data
            else:
                sent = 0
                with open(data, "rb") as handle:
                    for block in iter(lambda: handle.read(BLOCK), b""):
                        if stop is not None and stop.is_set():
                            raise RuntimeError(f"{what}: stopped (another upload failed)")
                        deadline.check(what)
                        sent += len(block)
                        if sent > size:
                            break
                        yield block
                        if progress is not None:
                            progress.add(len(block))
                if sent != size:  # the file changed under the upload: the length is wrong
                    raise RuntimeError(f"{what}: the file changed size while it was sent")
            yield tail

        answer = self._call(
            "POST",
            f"/upload/storage/v1/b/{bucket}/o?"
            + urllib.parse.urlencode({"uploadType": "multipart", **query}),
            deadline,
            body(),
            {
                "Content-Type": f"multipart/related; boundary={boundary}",
                "Content-Length": str(len(head) + size + len(tail)),
            },
        )
        return dict(json.loads(answer)) if answer.strip() else {}

    def set_custom_time(self, url: str, custom_time: str, deadline: Deadline) -> None:
        """objects.patch of `customTime`. The service refuses to move it back (400, "Custom
        time cannot be decreased", https://cloud.google.com/storage/docs/metadata#custom-time):
        that is another save having touched it later, which is as good.

        Retried like a read although it carries no precondition: it sets one field to a fixed
        value, so a repeat lands the same, and a repeat that comes after another save's later
        touch is the 400 above. (The Retry strategy page calls a PATCH idempotent only with
        `ifMetagenerationMatch`, for patches whose result depends on what was there.)"""
        bucket, name = split_gs(url)
        body = json.dumps({"customTime": custom_time}).encode()
        try:
            self.retry.run(
                lambda: self._call(
                    "PATCH",
                    self._object_path(bucket, name),
                    deadline,
                    body,
                    {"Content-Type": "application/json"},
                ),
                f"touch {url}",
                deadline,
            )
        except urllib.error.HTTPError as error:
            if error.code == 400:
                item = self.stat(url, deadline) or {}
                there = rfc3339_seconds(str(item.get("customTime") or ""))
                ours = rfc3339_seconds(custom_time)
                if there is not None and ours is not None and there >= ours:
                    return
            raise RuntimeError(f"touch {url}: HTTP {error.code}") from None

    # -- restore ----------------------------------------------------------------------------
    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        """Every object under `url` into `dest`, `self.workers` at a time (`run_pool`).

        An object already there with the same size and MD5 is kept; each file gets the
        object's saved mtime; the first object that fails (an HTTP error, a short body, the
        deadline) fails the whole download. Each file appears only whole: written as `.part`,
        its length checked against the answer's Content-Length (else the listed size), then
        renamed; whether its bytes are the saved ones is the manifest check's business
        (`verify`), which drops what does not match.
        """
        bucket, prefix = split_gs(url)
        listing = self.list(url, deadline)
        if not listing:
            raise RuntimeError(f"download {url}: Did not find existing container at: {url}")
        # Largest first: with a pool, a big entry started last would finish alone at the end.
        order = sorted(listing.items(), key=lambda kv: (-size_of(kv[1]), kv[0]))
        progress = Progress(url, len(order), sum(size_of(item) for _, item in order))
        workers = max(1, min(self.workers, len(order)))
        log(
            f"downloading {len(order)} objects ({progress.total_bytes / 1e6:.1f} MB) from {url} "
            f"via the JSON API, {workers} at a time"
        )
        stop = Stop()

        def one(rel: str, item: dict[str, Any]) -> Any:
            return lambda: self._download_one(
                rel, item, bucket=bucket, prefix=prefix, dest=dest, deadline=deadline,
                stop=stop, progress=progress,
            )  # fmt: skip

        run_pool(
            [one(rel, item) for rel, item in order], workers=workers, deadline=deadline,
            what=f"download {url}", progress=progress, stop=stop, name="xla-cache-get",
        )  # fmt: skip

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
        """One object into `dest/rel` (a pool worker), tried again on a transient failure (a
        5xx, a reset, a body cut short), each try from the first byte into a fresh `.part`."""
        if stop.is_set():
            return
        target = os.path.join(dest, rel)
        if os.path.exists(target) and same_bytes(item, target):
            progress.done(size_of(item), kept=True)
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = target + ".part"
        what = f"download gs://{bucket}/{prefix}{rel}"
        path = self._object_path(bucket, prefix + rel) + "?alt=media"
        try:
            self.retry.run(
                lambda: self._fetch(
                    path, item, part, target, deadline=deadline, stop=stop, progress=progress,
                    what=what,
                ),
                what, deadline, stopped=stop.is_set,
            )  # fmt: skip
        except urllib.error.HTTPError as error:
            unlink_quietly(part)
            raise RuntimeError(f"{what}: HTTP {error.code}") from None
        except BaseException:
            unlink_quietly(part)
            raise
        progress.done(0)

    def _fetch(
        self,
        path: str,
        item: dict[str, Any],
        part: str,
        target: str,
        *,
        deadline: Deadline,
        stop: Stop,
        progress: Progress,
        what: str,
    ) -> None:
        """One try of one object's download into `part`, renamed to `target` once whole."""
        with self._open("GET", path, deadline) as response, open(part, "wb") as handle:
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
                            sock.settimeout(max(MIN_READ_TIMEOUT, min(left, MAX_SOCKET_TIMEOUT)))
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
        # length is the only sign of a body cut short, a TCP disconnect worth a retry.
        if expected is not None and received < expected:
            raise BodyCutShort(f"{what}: short read {received} of {expected} bytes")
        mtime = object_mtime(item)
        if mtime is not None:  # as `gcloud storage rsync` does for a download
            os.utime(part, (mtime, mtime))
        os.replace(part, target)


def same_bytes(item: dict[str, Any], path: str) -> bool:
    """Whether the local file holds the listed object's bytes (size, then MD5), as `gcloud
    storage rsync` decides what to copy (googlecloudsdk/command_lib/storage/
    rsync_command_util.py)."""
    try:
        if int(item.get("size", -1)) != os.path.getsize(path):
            return False
        return file_digests(path)[2] == str(item.get("md5Hash"))
    except OSError:
        return False
