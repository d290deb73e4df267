"""The Cloud Storage JSON API over urllib, with a metadata-server token held in memory only.

https://cloud.google.com/storage/docs/json_api/v1/objects. Only this API reads an object with
its generation and answers a failed `ifGenerationMatch` with 412, which the saves' conditional
writes need (docs/compile-cache.md "Concurrent saves").
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

TOKEN_RETRY_SECONDS = 60.0
MAX_SOCKET_TIMEOUT = 120.0
MIN_READ_TIMEOUT = 0.1
LIST_FIELDS = "items(name,size,md5Hash,metadata,timeCreated,generation,customTime),nextPageToken"


class PreconditionFailed(RuntimeError):
    """412: the object's generation was not the one the call was conditional on."""


class JsonApi:
    name = "api"
    #: `--in-pod`: a starting GKE metadata server answers 403 and 404, a VM's only for good.
    in_pod = False

    def __init__(self) -> None:
        self.endpoint = os.environ.get("STORAGE_API_ENDPOINT", "https://storage.googleapis.com")
        self.metadata = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
        self.workers = pool_workers()
        self._token = ""
        self._expires = 0.0
        self._token_lock = threading.Lock()
        self.retry = Policy()
        self.spacing = WriteSpacing()

    def _bearer(self, deadline: Deadline) -> str:
        with self._token_lock:
            if time.time() >= self._expires:
                answer = self._fetch_token(deadline)
                self._token = str(answer["access_token"])
                self._expires = time.time() + float(answer.get("expires_in", 300)) - 60
            return f"Bearer {self._token}"

    def _fetch_token(self, deadline: Deadline) -> dict[str, Any]:
        """In a pod's first seconds the GKE metadata server refuses connections or answers 404
        (GKE docs, Workload Identity Federation limitations; google-auth-library-python#745).
        On a VM a 403 or 404 is final (no service account, no scope)."""
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
        """The response; its socket timeout is what is left of the deadline. `body` may be an
        iterable of bytes with a Content-Length, sent piece by piece (Lib/http/client.py
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
        """`_open` of a whole URL (a resumable upload's session URI)."""
        # The path only: a session URI's `upload_id` acts as a credential ("Resumable uploads").
        timeout = min(deadline.check(f"{method} {url.split('?', 1)[0]}"), MAX_SOCKET_TIMEOUT)
        request = urllib.request.Request(  # noqa: S310 - https endpoint (loopback in tests)
            url,
            data=body,
            method=method,
            headers={"Authorization": self._bearer(deadline), **(headers or {})},
        )
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310

    def _get(self, path: str, deadline: Deadline, what: str) -> bytes:
        return self.retry.run(lambda: self._call("GET", path, deadline), what, deadline)

    @staticmethod
    def _object_path(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"

    def list(self, url: str, deadline: Deadline) -> dict[str, dict[str, Any]]:
        """{name under `url`: Object resource}, all pages."""
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
        """(bytes, their generation), or (None, 0): what a conditional rewrite passes as
        `ifGenerationMatch`. A write in between (412, or 404) makes it read both again."""
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
        """Write `data` (bytes, or a file's path, streamed) as the object `url`; its resource.
        Multipart, not a media upload, so the custom time and mtime go with the bytes.

        A 412 after a try whose outcome is unknown (a 5xx, a reset, a timeout) is that try's
        own write only if the object holds exactly these bytes; taking every such 412 for
        success would keep another save's manifest as if it were this one's merge."""
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
        """A 400 "Custom time cannot be decreased" (docs/metadata#custom-time) means another save
        touched it later, which is as good. Retried without a precondition: a repeat of one
        field set to a fixed value lands the same."""
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

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        """Every object under `url` into `dest`; a file there with the same size and MD5 is kept.
        Each file appears only whole (a `.part`, its length checked, then renamed); whether its
        bytes are the saved ones is the manifest check's business (`verify`)."""
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
        """Each try starts from the first byte, into a fresh `.part`."""
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
        with self._open("GET", path, deadline) as response, open(part, "wb") as handle:
            expected = expected_bytes(response, item)
            received = 0
            sock = response_socket(response)
            # read1: one socket read per block, so a trickling server meets the deadline check.
            read = getattr(response, "read1", response.read)
            with stop.watching(sock):
                while True:
                    if stop.is_set():
                        raise RuntimeError(f"{what}: stopped (another download failed)")
                    left = deadline.check(what)
                    if sock is not None:
                        # Aim each read at the deadline: urlopen's timeout holds for every read.
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
        # read1 returns b"" on an early close, with no IncompleteRead (Lib/http/client.py).
        if expected is not None and received < expected:
            raise BodyCutShort(f"{what}: short read {received} of {expected} bytes")
        mtime = object_mtime(item)
        if mtime is not None:
            os.utime(part, (mtime, mtime))
        os.replace(part, target)


def same_bytes(item: dict[str, Any], path: str) -> bool:
    """Size, then MD5, as `gcloud storage rsync` decides what to copy (rsync_command_util.py)."""
    try:
        if int(item.get("size", -1)) != os.path.getsize(path):
            return False
        return file_digests(path)[2] == str(item.get("md5Hash"))
    except OSError:
        return False
