"""Loopback fake of the Cloud Storage JSON API, over the same local store as the fake gcloud.

The node's compile-cache tool falls back to this API when the VM has no gcloud. It serves what
that tool calls, as documented in https://cloud.google.com/storage/docs/json_api/v1/objects:
- ``GET    /storage/v1/b/B/o?prefix=P[&pageToken=T]``   objects.list (``items``, ``nextPageToken``)
- ``GET    /storage/v1/b/B/o/NAME``                     objects.get, the Object resource
- ``GET    /storage/v1/b/B/o/NAME?alt=media``           objects.get, the bytes (404 if absent)
- ``POST   /upload/storage/v1/b/B/o?uploadType=multipart``  objects.insert: a multipart/related
  body, JSON metadata (``name``, ``customTime``, custom ``metadata``) then the bytes; or
  ``uploadType=media&name=NAME`` with the bytes alone (no metadata: a media upload has none)
- ``PATCH  /storage/v1/b/B/o/NAME``                     objects.patch (``customTime`` only moves
  forward: 400 otherwise, as on the real service)
- ``POST   /upload/storage/v1/b/B/o?uploadType=resumable`` and ``PUT`` to its session URI:
  resumable uploads, with status checks and 308 Resume Incomplete
  (tests/support/fakes/gcs_resumable.py)
Injected transient failures (``inject``: a status with the service's error body, a reset
connection, a reset partway through a resumable PUT, an answer lost after the request was done;
tests/support/fakes/gcs_faults.py) meet the next matching requests; each request's arrival time is
recorded (``requests[i]["time"]``, time.monotonic).
Request preconditions (https://cloud.google.com/storage/docs/request-preconditions): objects.get
(either form) and objects.insert take ``ifGenerationMatch``; the request proceeds only if the
object's live generation is that number (``0``: there is no live object, "Setting to 0 makes
the operation succeed only if there are no live versions of the object", objects.insert), and
otherwise fails with 412 Precondition Failed and changes nothing. The check and the write are
one step (tests/support/fakes/gcs_store.py), as on the service, which keeps the last writer
otherwise. Object resources carry ``generation`` and ``metageneration`` (int64 values, sent as JSON
strings, as the JSON API sends every int64).
Every call needs ``Authorization: Bearer <token>`` (401 otherwise). Faults set on the store
(``list``, ``read``, ``write``, ``touch``, ``put``) apply here too; a ``read`` fault with
``match`` hits only the object downloads whose name contains it. ``requests`` records each call.

Concurrency, as the real service serves it (many connections at once; a bucket starts at about
5000 object reads per second, https://cloud.google.com/storage/docs/request-rate): a thread per
request (``ThreadingHTTPServer``). ``latency`` (seconds, default 0) delays every answer, a
stand-in for a Cloud Storage round trip, so that overlapping downloads can be seen and timed;
``media_in_flight`` / ``max_media_in_flight`` count the object downloads (``alt=media``) waited
on at once, from the request's arrival to the start of its answer; ``uploads_in_flight`` /
``max_uploads_in_flight`` the same for uploads, from the request line (before its body is
read) to the answer (``reset_counts`` starts over). ``hold(match, count)`` makes the first
``count`` uploads of objects whose name contains ``match`` wait until all ``count`` have
arrived (each has read what it based itself on, none has written yet), then go on one after
another: the interleaving two concurrent savers on two nodes may meet. ``answers`` records
each request's status.
``break_body`` makes the answer to the object downloads whose name contains ``match`` break
off after its headers, which declare the whole length: ``send`` bytes of the body go out, spread
over ``trickle`` seconds, then ``stall`` seconds of silence, then the connection closes. A real
connection can end like that mid-body (a reset path, a dying proxy), and a client using
http.client sees only a shorter body: CPython's ``HTTPResponse.read1`` (and ``read(n)``) return
b"" at end-of-stream with no ``IncompleteRead`` (Lib/http/client.py), so only the length tells.
Objects are answered as Object resources (``name``, ``size``, ``md5Hash``, ``timeCreated``,
``updated``, ``customTime``, and the custom ``metadata`` map, where ``gcloud storage`` keeps a
file's mtime as ``goog-reserved-file-mtime``, googlecloudsdk/command_lib/storage/posix_util.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.fakes.gcs_faults import Injection, Injections, Reset, error_body, reset
from tests.support.fakes.gcs_resumable import Sessions, content_range
from tests.support.fakes.gcs_store import GcsStore, StoreError
from tests.support.fakes.loopback import LoopbackHttpServer

PAGE_SIZE = 1000
MTIME_KEY = "goog-reserved-file-mtime"
#: The node tool's backoff (scripts/remote/xla_cache_retry.py), made small for tests that inject
#: a lasting fault: with google-api-core's defaults (first wait up to 1 s, retries for 120 s)
#: each such test would wait two minutes before the failure it is about.
QUICK_RETRIES = {"TPU_VLLM_CACHE_RETRY_INITIAL": "0.01", "TPU_VLLM_CACHE_RETRY_SECONDS": "0.3"}


def rfc3339(seconds: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        + f".{int(seconds % 1 * 1000):03d}Z"
    )


@dataclass(frozen=True)
class BrokenBody:
    """How an object download's answer breaks off (see the module docstring)."""

    match: str
    send: int
    trickle: float = 0.0
    stall: float = 0.0


def resource(stored: dict[str, Any]) -> dict[str, Any]:
    """The store's record of an object as a JSON API Object resource."""
    answer: dict[str, Any] = {
        k: stored[k] for k in ("name", "bucket", "size", "md5Hash") if k in stored
    }
    if stored.get("customTime"):
        answer["customTime"] = stored["customTime"]
    created = float(stored.get("created") or stored.get("updated") or 0)
    answer["timeCreated"] = rfc3339(created)
    answer["updated"] = rfc3339(float(stored.get("updated") or created))
    if stored.get("mtime") is not None:
        answer["metadata"] = {MTIME_KEY: str(int(stored["mtime"]))}
    answer["generation"] = str(int(stored.get("generation") or 1))
    answer["metageneration"] = str(int(stored.get("metageneration") or 1))
    return answer


class Hold:
    """The first `count` uploads matching `match` wait for one another (see the docstring)."""

    def __init__(self, match: str, count: int, timeout: float) -> None:
        self.match = match
        self.count = count
        self.timeout = timeout
        self.arrived = 0
        self.cond = threading.Condition()
        self.turn = threading.Lock()

    def wait(self, name: str) -> bool:
        """Wait for the others (bounded); True if this upload was held (then it must take
        `turn` while it writes, so the held ones write one at a time)."""
        with self.cond:
            if self.match not in name or self.arrived >= self.count:
                return False
            self.arrived += 1
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.arrived >= self.count, timeout=self.timeout)
            return True


class FakeGcsApi(LoopbackHttpServer):
    thread_name = "fake-gcs-api"

    def __init__(self, root: Path, token: str = "test-token", latency: float = 0.0) -> None:
        super().__init__()
        self.store = GcsStore(str(root))
        self.token = token
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.media_in_flight = 0
        self.max_media_in_flight = 0
        self.uploads_in_flight = 0
        self.max_uploads_in_flight = 0
        #: (method, path, status, object name or "") of each answer.
        self.answers: list[tuple[str, str, int, str]] = []
        self.holds: list[Hold] = []
        self.broken_bodies: list[BrokenBody] = []
        self.injections = Injections()
        self.sessions = Sessions()
        self._lock = threading.Lock()
        # Set by stop(): a broken answer's trickle and stall end then.
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _answer(
                self,
                status: int,
                body: Any,
                raw: bytes | None = None,
                headers: dict[str, str] | None = None,
            ) -> None:
                if getattr(self, "lose_answer", False):
                    reset(self.connection)  # done, but the client never hears of it
                self._uploaded()
                with fake._lock:
                    fake.answers.append(
                        (self.command, self.path, status, getattr(self, "object_name", ""))
                    )
                data = raw if raw is not None else json.dumps(body).encode()
                # 308 is the upload protocol's "Resume Incomplete", not a redirect.
                self.send_response(status, "Resume Incomplete" if status == 308 else None)
                for header, value in (headers or {}).items():
                    self.send_header(header, value)
                if "Content-Type" not in (headers or {}):
                    self.send_header("Content-Type", "application/json" if raw is None else
                                     "application/octet-stream")  # fmt: skip
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer_broken(self, data: bytes, broken: BrokenBody) -> None:
                """Headers with the whole length, part of the body, silence, then close."""
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                sent = data[: broken.send]
                pieces = max(1, int(broken.trickle / 0.25))
                step = max(1, -(-len(sent) // pieces))
                for start in range(0, len(sent), step):
                    if start and fake._stopping.wait(broken.trickle / pieces):
                        return
                    self.wfile.write(sent[start : start + step])
                fake._stopping.wait(broken.stall)
                self.close_connection = True

            def _error(self, status: int, message: str) -> None:
                self._answer(status, {"error": {"code": status, "message": message}})

            def _handle(self, method: str) -> None:
                self.object_name = ""
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                media = method == "GET" and query.get("alt") == "media"
                self.uploading = method in ("POST", "PUT") and url.path.startswith("/upload/")
                if self.uploading:
                    with fake._lock:
                        fake.uploads_in_flight += 1
                        fake.max_uploads_in_flight = max(
                            fake.max_uploads_in_flight, fake.uploads_in_flight
                        )
                try:
                    self._serve(method, url, query, media)
                finally:
                    self._uploaded()

            def _uploaded(self) -> None:
                """An upload is in flight until its answer starts (as a download is): the
                client's worker sends its next one only after that, so a pool of N never
                shows as more than N."""
                if getattr(self, "uploading", False):
                    self.uploading = False
                    with fake._lock:
                        fake.uploads_in_flight -= 1

            def _serve(
                self, method: str, url: urllib.parse.SplitResult, query: dict[str, str],
                media: bool,
            ) -> None:  # fmt: skip
                body = self._body() if method in ("POST", "PATCH") else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                with fake._lock:
                    fake.requests.append(
                        {"method": method, "path": self.path, "headers": headers, "body": body,
                         "time": time.monotonic()}
                    )  # fmt: skip
                    if media:
                        fake.media_in_flight += 1
                        fake.max_media_in_flight = max(
                            fake.max_media_in_flight, fake.media_in_flight
                        )
                try:
                    if fake.latency:
                        time.sleep(fake.latency)
                finally:
                    # Counted until the answer starts: a client sees it only after this, so a
                    # pool of N never shows as more than N.
                    if media:
                        with fake._lock:
                            fake.media_in_flight -= 1
                if headers.get("authorization") != f"Bearer {fake.token}":
                    self._error(401, "Invalid Credentials")
                    return
                parts = url.path.split("/")
                try:
                    if self._injected(method, url, query, body, headers):
                        return
                    self._route(method, parts, query, body, headers)
                except StoreError as error:
                    if error.plain:
                        text = str(error).encode()
                        plain = {"Content-Type": "text/plain; charset=utf-8"}
                        self._answer(error.status, None, raw=text, headers=plain)
                    else:
                        self._error(error.status, str(error))

            def _injected(
                self, method: str, url: urllib.parse.SplitResult, query: dict[str, str],
                body: bytes, headers: dict[str, str],
            ) -> bool:  # fmt: skip
                """Meet an injected failure (tests/support/fakes/gcs_faults.py), if one applies:
                True if it answered for the request."""
                name = _object_name(url, query, body, headers, fake.sessions)
                self.object_name = name
                injection = fake.injections.take(method, f"{urllib.parse.unquote(url.path)} {name}")
                self.lose_answer = injection is not None and injection.lose_answer
                self.cut_after = injection.after_bytes if injection is not None else None
                if injection is None or self.lose_answer or self.cut_after is not None:
                    return False
                if not injection.status:
                    reset(self.connection)
                if method == "PUT":
                    self._body()
                bucket = url.path.split("/")[5] if url.path.startswith("/upload/") else (
                    url.path.split("/")[4])  # fmt: skip
                self._answer(injection.status, error_body(injection.status, f"{bucket}/{name}"))
                return True

            def _insert(
                self, bucket: str, query: dict[str, str], body: bytes, headers: dict[str, str]
            ) -> None:
                """objects.insert, multipart or media, on its precondition (if any)."""
                store = fake.store
                store.apply_fault("write")
                kind = query.get("uploadType")
                if kind == "multipart":
                    meta, data = _multipart(headers.get("content-type", ""), body)
                elif kind == "media" and query.get("name"):
                    meta, data = {"name": query["name"]}, body
                else:
                    raise StoreError(400, f"uploadType {kind!r} is not served here")
                self.object_name = str(meta["name"])
                condition = query.get("ifGenerationMatch")
                condition_value = int(condition) if condition is not None else None
                self._answer(200, self._put(bucket, meta, data, condition_value))

            def _put(
                self, bucket: str, meta: dict[str, Any], data: bytes, condition: int | None
            ) -> dict[str, Any]:
                """Write the object on its precondition (held, if a hold applies); its
                resource."""
                mtime = (meta.get("metadata") or {}).get(MTIME_KEY)
                held = [hold for hold in fake.holds if hold.wait(meta["name"])]
                with contextlib.ExitStack() as turns:
                    for hold in held:
                        turns.enter_context(hold.turn)
                    stored = fake.store.put(
                        bucket, meta["name"], data, custom_time=meta.get("customTime"),
                        mtime=int(mtime) if mtime is not None else None,
                        if_generation_match=condition,
                    )  # fmt: skip
                return resource(stored)

            def _open_session(self, bucket: str, query: dict[str, str], body: bytes) -> None:
                """objects.insert with uploadType=resumable: a session, its URI in Location."""
                fake.store.apply_fault("write")
                meta = dict(json.loads(body)) if body.strip() else {}
                if query.get("name"):
                    meta["name"] = query["name"]
                if not meta.get("name"):
                    raise StoreError(400, "Required: the object's name")
                self.object_name = str(meta["name"])
                condition = query.get("ifGenerationMatch")
                upload_id = fake.sessions.open(
                    bucket, meta, int(condition) if condition is not None else None
                )
                location = (
                    f"{fake.url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable"
                    f"&upload_id={upload_id}"
                )
                self._answer(200, None, b"", {"Location": location})

            def _session_put(self, query: dict[str, str], headers: dict[str, str]) -> None:
                """A PUT to a session: bytes from an offset, or (no body) a status check."""
                session = fake.sessions.get(query.get("upload_id", ""))
                self.object_name = session.name
                length = int(headers.get("content-length") or 0)
                start, _end, total = content_range(headers.get("content-range", ""))
                if self.cut_after is not None:  # an injected reset partway through the bytes
                    chunk = self.rfile.read(min(self.cut_after, length))
                    if start is not None and session.done is None:
                        session.take(start, chunk)
                    reset(self.connection)
                chunk = self.rfile.read(length)
                if session.done is None and start is not None:
                    session.take(start, chunk)
                if session.done is None and total is not None and len(session.data) >= total:
                    session.done = self._put(
                        session.bucket, session.meta, bytes(session.data), session.condition
                    )
                if session.done is not None:
                    self._answer(200, session.done)
                else:
                    self._answer(308, None, b"", session.range_header())

            def _route(
                self,
                method: str,
                parts: list[str],
                query: dict[str, str],
                body: bytes,
                headers: dict[str, str],
            ) -> None:
                store = fake.store
                if parts[1:3] == ["upload", "storage"] and method == "POST":
                    if query.get("uploadType") == "resumable":
                        self._open_session(parts[5], query, body)
                    else:
                        self._insert(parts[5], query, body, headers)
                    return
                if parts[1:3] == ["upload", "storage"] and method == "PUT":
                    self._session_put(query, headers)
                    return
                if parts[1:3] != ["storage", "v1"] or len(parts) < 6 or parts[5] != "o":
                    self._error(404, "Not Found")
                    return
                bucket = parts[4]
                if len(parts) == 6 and method == "GET":
                    store.apply_fault("list")
                    records = store.list_objects(bucket, query.get("prefix", ""))
                    start = int(query.get("pageToken") or 0)
                    page = records[start : start + PAGE_SIZE]
                    answer: dict[str, Any] = {"items": [resource(r) for r in page]}
                    if start + PAGE_SIZE < len(records):
                        answer["nextPageToken"] = str(start + PAGE_SIZE)
                    self._answer(200, answer)
                    return
                name = urllib.parse.unquote("/".join(parts[6:]))
                self.object_name = name
                condition = query.get("ifGenerationMatch")
                expected = int(condition) if condition is not None else None
                if method == "GET" and query.get("alt") == "media":
                    store.apply_fault("read", name)
                    # Unconditional: the bytes alone, which a write replaces whole (os.replace).
                    data = (
                        store.get(bucket, name)
                        if expected is None
                        else store.read_object(bucket, name, expected)[0]
                    )
                    broken = next((b for b in fake.broken_bodies if b.match in name), None)
                    if broken is None:
                        self._answer(200, None, data)
                    else:
                        self._answer_broken(data, broken)
                elif method == "GET":
                    store.apply_fault("stat", name)
                    _data, stored = store.read_object(bucket, name, expected)
                    self._answer(200, resource(stored))
                elif method == "PATCH":
                    store.apply_fault("touch")
                    store.set_custom_time(bucket, name, json.loads(body)["customTime"])
                    self._answer(200, resource(store.meta(bucket, name)))
                else:
                    self._error(405, f"{method} is not served here")

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def log_message(self, *_args: object) -> None:
                return

        self._handler = Handler

    def break_body(self, match: str, send: int, trickle: float = 0.0, stall: float = 0.0) -> None:
        """Break off the answers to the downloads of objects whose name contains `match`."""
        self.broken_bodies.append(BrokenBody(match, send, trickle, stall))

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def reset_counts(self) -> None:
        """Forget the requests and the most downloads and uploads in flight seen so far."""
        with self._lock:
            self.requests.clear()
            self.answers.clear()
            self.max_media_in_flight = self.media_in_flight
            self.max_uploads_in_flight = self.uploads_in_flight

    def inject(
        self,
        method: str,
        match: str,
        status: int = 0,
        *,
        times: int = 1,
        after_bytes: int | None = None,
        lose_answer: bool = False,
    ) -> None:
        """The next `times` `method` requests on objects whose name (or path) contains `match`
        meet `status` with the service's error body, or with status 0 a reset connection;
        `after_bytes` resets a resumable PUT after that many of its bytes (kept); with
        `lose_answer` the request is done and then the connection reset (tests/support/fakes/
        gcs_faults.py)."""
        self.injections.add(Injection(method, match, status, times, after_bytes, lose_answer))

    def hold(self, match: str, count: int, timeout: float = 30.0) -> None:
        """Hold the first `count` uploads of objects whose name contains `match` until all
        have arrived (at most `timeout` seconds), then let them write one at a time."""
        self.holds.append(Hold(match, count, timeout))

    def statuses(self, method: str, name: str) -> list[int]:
        """The statuses answered to `method` requests on objects whose name contains `name`."""
        with self._lock:
            return [s for m, _p, s, o in self.answers if m == method and name in o]

    def start(self) -> FakeGcsApi:
        return self._serve(_Server(("127.0.0.1", 0), self._handler))


class _Server(ThreadingHTTPServer):
    """socketserver's listen backlog is 5 (`request_queue_size`): a client opening more
    connections at once than that has the extra SYNs dropped and retried a second later, which
    the real service does not do. Room for any download pool the node tool may run."""

    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer (a save killed by SIGTERM mid-upload, a
        timed-out request) is no error of the service: the real one drops the answer too.
        socketserver would print a traceback into the test run's output for it."""
        if isinstance(
            sys.exc_info()[1],
            (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, Reset),
        ):
            return
        super().handle_error(request, client_address)


def _object_name(
    url: urllib.parse.SplitResult,
    query: dict[str, str],
    body: bytes,
    headers: dict[str, str],
    sessions: Sessions,
) -> str:
    """The object a request is about, where the request names it: the path, a multipart
    body's metadata, a resumable session's, or the `name` parameter."""
    parts = url.path.split("/")
    if not url.path.startswith("/upload/"):
        return urllib.parse.unquote("/".join(parts[6:]))
    if query.get("upload_id"):
        return sessions.name_of(query["upload_id"])
    if query.get("name"):
        return query["name"]
    with contextlib.suppress(StoreError, ValueError, KeyError):
        if query.get("uploadType") == "multipart":
            return str(_multipart(headers.get("content-type", ""), body)[0]["name"])
        return str(json.loads(body)["name"])
    return ""


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes]:
    """The JSON metadata part and the media part of a multipart/related upload (RFC 2387):
    parts between `--BOUNDARY` delimiters, each delimiter after a CRLF, each part its headers,
    an empty line, then its content; the last delimiter is `--BOUNDARY--` (RFC 2046 5.1.1).
    Split on the delimiter rather than parsed line by line: a part may be megabytes."""
    kind, _, rest = content_type.partition(";")
    params = {}
    for param in rest.split(";"):
        name, _, value = param.strip().partition("=")
        params[name.lower()] = value.strip().strip('"')
    boundary = params.get("boundary", "")
    start = body.find(b"--" + boundary.encode()) if boundary else -1
    if kind.strip().lower() != "multipart/related" or start < 0:
        raise StoreError(400, "a multipart upload needs a multipart/related body with a boundary")
    parts: list[bytes] = []
    for chunk in body[start + len(boundary) + 2 :].split(b"\r\n--" + boundary.encode()):
        if chunk.startswith(b"--"):  # the close delimiter
            break
        _headers, blank, content = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not blank:
            raise StoreError(400, "a multipart part without its empty line after the headers")
        parts.append(content)
    if len(parts) != 2:
        raise StoreError(400, "a multipart upload needs a metadata part and a media part")
    meta, data = parts
    return dict(json.loads(meta)), data
