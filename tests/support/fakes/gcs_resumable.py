"""The fake Cloud Storage JSON API's resumable upload sessions (tests/support/fakes/gcs_api.py).

As the JSON API documents them (https://cloud.google.com/storage/docs/performing-resumable-
uploads) and as googleapis/storage-testbench serves them (testbench/rest_server.py
`object_insert`, `resumable_upload_chunk`; gcs/upload.py `init_resumable_rest`,
`resumable_status_rest`):
- ``POST /upload/storage/v1/b/B/o?uploadType=resumable`` with the object's JSON metadata opens
  a session: 200, empty body, ``Location: .../upload/storage/v1/b/B/o?uploadType=resumable&
  upload_id=ID``; the precondition (``ifGenerationMatch``) is kept and checked when the upload
  completes;
- ``PUT`` to it with ``Content-Range: bytes S-E/T`` appends the bytes past what it holds (bytes
  sent again are ignored, "resent data", https://cloud.google.com/storage/docs/resumable-uploads);
  S past what it holds is refused with a plain-text 503. All T in: the object is written, 200
  with its resource; otherwise 308 with ``Range: bytes=0-LAST``;
- ``PUT`` with no body and ``Content-Range: bytes */T`` asks for the status: 308, with ``Range``
  only if some bytes are held, or 200 and the resource if it completed;
- an unknown ``upload_id``: 404.
A reset partway through a PUT keeps the bytes read before it, as the testbench's
`handle_retry_uploads_error_after_bytes` commits the part received before its fault.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.gcs_store import StoreError

_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$")


@dataclass
class Session:
    bucket: str
    meta: dict[str, Any]
    condition: int | None
    data: bytearray = field(default_factory=bytearray)
    done: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    def range_header(self) -> dict[str, str]:
        return {"Range": f"bytes=0-{len(self.data) - 1}"} if self.data else {}

    def take(self, start: int, chunk: bytes) -> None:
        """Append what `chunk` (starting at `start`) adds past the bytes already held."""
        held = len(self.data)
        if start > held:
            # 503 in plain text, as the service answers it (googleapis/java-storage's tests:
            # APPEND_GREATER_THAN_CURRENT_SIZE; the google-cloud-go emulator).
            raise StoreError(
                503,
                f"Invalid request.  According to the Content-Range header, the upload offset "
                f"is {start} byte(s), which exceeds already uploaded size of {held} byte(s).",
                plain=True,
            )
        self.data += chunk[held - start :]


class Sessions:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, bucket: str, meta: dict[str, Any], condition: int | None) -> str:
        upload_id = uuid.uuid4().hex
        with self._lock:
            self._sessions[upload_id] = Session(bucket, meta, condition)
        return upload_id

    def get(self, upload_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(upload_id)
        if session is None:
            raise StoreError(404, f"No such upload session: {upload_id}")
        return session

    def name_of(self, upload_id: str) -> str:
        with self._lock:
            session = self._sessions.get(upload_id)
        return session.name if session is not None else ""


def content_range(header: str) -> tuple[int | None, int | None, int | None]:
    """(start, end, total) of ``bytes S-E/T`` or ``bytes */T`` (None for each ``*``)."""
    match = _RANGE.match(header.strip())
    if match is None:
        raise StoreError(400, f"Invalid Content-Range: {header!r}")
    start, end, total = match.groups()
    return (
        int(start) if start is not None else None,
        int(end) if end is not None else None,
        int(total) if total not in (None, "*") else None,
    )
