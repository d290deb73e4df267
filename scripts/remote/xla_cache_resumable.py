"""A resumable upload of one large cache entry: a broken connection then costs only the rest.

The protocol: https://cloud.google.com/storage/docs/performing-resumable-uploads, as
python-storage's google/cloud/storage/_media/_upload.py speaks it. Each `attempt` is one try;
xla_cache_api retries, and a retry asks the session how far it got (308, `Range`).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
from collections.abc import Iterator
from typing import Any, Protocol

from xla_cache_base import BLOCK, Deadline
from xla_cache_pool import Progress, Stop

#: google-cloud-storage's own cut-over from multipart (blob.py `_MAX_MULTIPART_SIZE`).
RESUMABLE_BYTES = 8 << 20
_RANGE = re.compile(r"bytes=0-(\d+)$", re.IGNORECASE)


class Opener(Protocol):
    def open_url(
        self, method: str, url: str, deadline: Deadline, body: Any, headers: dict[str, str]
    ) -> Any: ...

    endpoint: str


class SessionGone(ConnectionError):
    """404 or 410 (sessions last a week): the next attempt starts a new session."""


class Incomplete(ConnectionError):
    """308 after the last byte was sent: the next attempt asks how far the service got."""


class ResumableUpload:
    def __init__(
        self,
        api: Opener,
        bucket: str,
        fields: dict[str, Any],
        path: str,
        *,
        size: int,
        query: dict[str, Any],
        progress: Progress | None,
        stop: Stop | None,
    ) -> None:
        self.api = api
        self.bucket = bucket
        self.fields = fields
        self.path = path
        self.size = size
        self.query = {**query, "uploadType": "resumable"}
        self.progress = progress
        self.stop = stop
        self.what = f"write gs://{bucket}/{fields['name']}"
        self.session = ""

    def attempt(self, deadline: Deadline) -> dict[str, Any]:
        if not self.session:
            self.session = self._start(deadline)
            offset = 0
        else:
            status = self._status(deadline)
            if isinstance(status, dict):
                return status
            offset = status
        return self._send_from(offset, deadline)

    def _start(self, deadline: Deadline) -> str:
        endpoint = self.api.endpoint.rstrip("/")
        url = f"{endpoint}/upload/storage/v1/b/{self.bucket}/o?{urllib.parse.urlencode(self.query)}"
        body = json.dumps(self.fields).encode()
        headers = {
            "Content-Type": "application/json; charset=UTF-8",
            "X-Upload-Content-Type": "application/octet-stream",
            "X-Upload-Content-Length": str(self.size),
        }
        with self.api.open_url("POST", url, deadline, body, headers) as response:
            response.read()
            location = str(response.headers.get("Location") or "")
        # The token goes with every request to the session URI: only to the endpoint.
        if urllib.parse.urlsplit(location).netloc != urllib.parse.urlsplit(endpoint).netloc:
            raise RuntimeError(f"{self.what}: the upload session is not on {endpoint}")
        return location

    def _status(self, deadline: Deadline) -> int | dict[str, Any]:
        """How many bytes the session holds, or the Object resource if it finished."""
        headers = {"Content-Range": f"bytes */{self.size}", "Content-Length": "0"}
        try:
            with self.api.open_url("PUT", self.session, deadline, b"", headers) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as error:
            if error.code in (404, 410):
                self.session = ""
                raise SessionGone(f"{self.what}: the upload session is gone") from None
            if error.code != 308:
                raise
            return persisted(error.headers.get("Range"))

    def _send_from(self, offset: int, deadline: Deadline) -> dict[str, Any]:
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Range": f"bytes {offset}-{self.size - 1}/{self.size}",
            "Content-Length": str(self.size - offset),
        }
        try:
            with self.api.open_url(
                "PUT", self.session, deadline, self._body(offset, deadline), headers
            ) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as error:
            if error.code in (404, 410):
                self.session = ""
                raise SessionGone(f"{self.what}: the upload session is gone") from None
            if error.code == 308:
                raise Incomplete(f"{self.what}: the service has not all the bytes yet") from None
            raise

    def _body(self, offset: int, deadline: Deadline) -> Iterator[bytes]:
        left = self.size - offset
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            while left > 0:
                if self.stop is not None and self.stop.is_set():
                    raise RuntimeError(f"{self.what}: stopped (another upload failed)")
                deadline.check(self.what)
                block = handle.read(min(BLOCK, left))
                if not block:
                    raise RuntimeError(f"{self.what}: the file changed size while it was sent")
                left -= len(block)
                yield block
                if self.progress is not None:
                    self.progress.add(len(block))


def persisted(header: str | None) -> int:
    """The next offset from a 308's `Range: bytes=0-LAST`; none means nothing yet."""
    if not header:
        return 0
    match = _RANGE.match(header.strip())
    if match is None:
        raise RuntimeError(f"an upload status with an unexpected Range: {header!r}")
    return int(match.group(1)) + 1
