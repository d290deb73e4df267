"""A Cloud Storage bucket kept in a local directory: what the fake `gcloud storage` and the fake
JSON API (tests/support/fakes/gcs_api.py) both read and write, and what tests inspect.

Layout under the root (``FAKE_GCS_ROOT`` on the SSH "VM")::

    <bucket>/<object name>               the object's bytes
    .meta/<bucket>/<object name>.json    {"customTime", "mtime", "md5Hash", "crc32c"?, "updated",
                                          "created", "generation", "metageneration"}
    .lock                                held (flock) while a write checks its precondition
    faults.json                          {"<operation>": {"fail": "message"} | {"delay": secs}
                                          | {"fail": "message", "after": N}}
    uploads.jsonl                        one line per object written: {"bucket", "name", "time"}

Behaviour copied from the real service (https://cloud.google.com/storage/docs/metadata):
an object's ``customTime`` can be set or moved later but never earlier (the API answers 400);
``md5Hash`` is the base64 MD5 of the bytes; an object is written whole or not at all (a failed
upload leaves no object). ``put`` faults with ``after`` let N objects through, then fail: an
upload that breaks midway. ``gcloud storage rsync`` keeps a file's mtime in
the object's custom metadata (``goog-reserved-file-mtime``) and compares mtime and size
(googlecloudsdk/command_lib/storage/rsync_command_util.py), so ``mtime`` is kept here too.

Generations and preconditions, as the service keeps them: each write of an object's data gives
it a new ``generation`` (a larger number than any before) and ``metageneration`` 1; a metadata
update (``set_custom_time``) adds 1 to the metageneration (googleapis/python-storage
docs/generation_metageneration.rst, "Generation", "Metageneration"). A write may carry
``if_generation_match``: it happens only if the object's live generation is that number, 0
standing for "no live object", and otherwise fails with 412 Precondition Failed, writing
nothing (https://cloud.google.com/storage/docs/request-preconditions; googleapis/
storage-testbench testbench/database.py ``check_object_generation`` compares the live
generation, 0 when there is none). Cloud Storage keeps the last writer, so the check and the
write are one step here: under an flock of ``.lock`` (writers are the fake API's threads and
the fake gcloud's processes), the bytes already written to a temporary file of their own.
Stdlib only, Python 3.9+: the fake gcloud runs it under the system python3.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

FAULTS = "faults.json"
META = ".meta"
UPLOADS = "uploads.jsonl"
LOCK = ".lock"
#: The JSON API's message for a failed precondition (the status is what clients act on).
PRECONDITION_FAILED = "At least one of the pre-conditions you specified did not hold."


class StoreError(Exception):
    """`plain`: the service answers this one as text, not as the JSON API's error object."""

    def __init__(self, status: int, message: str, *, plain: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.plain = plain


class GcsStore:
    def __init__(self, root: str) -> None:
        self.root = root
        self._md5s: dict[str, tuple[tuple[int, int, int], str]] = {}

    # -- test knobs -----------------------------------------------------------------------
    def create_bucket(self, bucket: str) -> None:
        os.makedirs(os.path.join(self.root, bucket), exist_ok=True)
        os.makedirs(os.path.join(self.root, META, bucket), exist_ok=True)
        with open(os.path.join(self.root, UPLOADS), "a", encoding="utf-8"):
            pass
        with open(os.path.join(self.root, LOCK), "a", encoding="utf-8"):
            pass

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's one lock: an flock, so it holds across the fake gcloud's processes and
        the fake API's threads alike (each opens its own descriptor). Read-only suffices for
        flock, so a user that may not write the file still takes it."""
        path = os.path.join(self.root, LOCK)
        if not os.path.exists(path):
            with open(path, "a", encoding="utf-8"):
                pass
        with open(path, encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def set_fault(
        self,
        operation: str,
        *,
        fail: str = "",
        delay: float = 0.0,
        after: int | None = None,
        match: str = "",
    ) -> None:
        """Make `operation` (read, write, download, upload, touch, list) fail or stall. `put`
        (any object write, by either transport) with `after=N` lets N objects through first;
        with `match`, only writes of objects whose name contains it fail."""
        faults = self.faults()
        fault: dict[str, Any] = {"fail": fail} if fail else {"delay": delay}
        if after is not None:  # counted from now
            fault["after"] = len(self.uploads()) + after
        if match:
            fault["match"] = match
        faults[operation] = fault
        self._write_json(os.path.join(self.root, FAULTS), faults)

    def clear_faults(self) -> None:
        self._write_json(os.path.join(self.root, FAULTS), {})

    def faults(self) -> dict[str, Any]:
        try:
            with open(os.path.join(self.root, FAULTS), encoding="utf-8") as handle:
                data = json.load(handle)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def apply_fault(self, operation: str, name: str = "") -> None:
        """Called by the fakes before doing `operation` (on object `name`): stall, or a 503."""
        fault = self.faults().get(operation) or {}
        if "after" in fault and len(self.uploads()) < int(fault["after"]):
            return
        if fault.get("match") and str(fault["match"]) not in name:
            return
        if fault.get("delay"):
            time.sleep(float(fault["delay"]))
        if fault.get("fail"):
            raise StoreError(503, str(fault["fail"]))

    # -- objects --------------------------------------------------------------------------
    def _path(self, bucket: str, name: str) -> str:
        if not os.path.isdir(os.path.join(self.root, bucket)):
            raise StoreError(404, f"The specified bucket does not exist: {bucket}")
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise StoreError(400, f"Invalid object name: {name!r}")
        return os.path.join(self.root, bucket, name)

    def _meta_path(self, bucket: str, name: str) -> str:
        return os.path.join(self.root, META, bucket, name + ".json")

    @staticmethod
    def _write_json(path: str, data: dict[str, Any]) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)

    def exists(self, bucket: str, name: str) -> bool:
        return os.path.isfile(self._path(bucket, name))

    def get(self, bucket: str, name: str) -> bytes:
        path = self._path(bucket, name)
        if not os.path.isfile(path):
            raise StoreError(404, f"No such object: {bucket}/{name}")
        with open(path, "rb") as handle:
            return handle.read()

    def _md5(self, path: str, data: bytes) -> str:
        """The bytes' MD5, base64, computed again only when the file changed (its inode, size
        and mtime), so a listing of a big generation does not hash all of it each time. A file
        changed within the last second is always hashed: a file system's mtime may tick
        coarser than a test's quick second write."""
        info = os.stat(path)
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        known = self._md5s.get(path)
        settled = time.time_ns() - info.st_mtime_ns > 1_000_000_000
        if known is not None and known[0] == key and settled:
            return known[1]
        digest = base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324
        self._md5s[path] = (key, digest)
        return digest

    def meta(self, bucket: str, name: str) -> dict[str, Any]:
        data = self.get(bucket, name)
        try:
            with open(self._meta_path(bucket, name), encoding="utf-8") as handle:
                stored = dict(json.load(handle))
        except (OSError, ValueError):
            stored = {}
        stored.update(
            name=name,
            bucket=bucket,
            size=str(len(data)),
            md5Hash=self._md5(self._path(bucket, name), data),
        )
        stored.setdefault("generation", 1)
        stored.setdefault("metageneration", 1)
        return stored

    def backdate(self, bucket: str, name: str, seconds: float) -> None:
        """Make the object look written `seconds` ago (its creation and update times)."""
        with self._locked():
            meta = self.meta(bucket, name)
            stored = {
                k: v for k, v in meta.items() if k not in ("name", "bucket", "size", "md5Hash")
            }
            stored["created"] = stored["updated"] = float(stored.get("created", 0)) - seconds
            self._write_json(self._meta_path(bucket, name), stored)

    def read_object(
        self, bucket: str, name: str, if_generation_match: int | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """(bytes, record) of one generation, read in one step with the writes (objects.get
        honours `ifGenerationMatch` too: 412 if the live generation is another)."""
        with self._locked():
            self.check_generation(bucket, name, if_generation_match)
            return self.get(bucket, name), self.meta(bucket, name)

    def list_objects(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """The records of the live objects under `prefix`, in one step with the writes."""
        with self._locked():
            return [self.meta(bucket, name) for name in self.names(bucket, prefix)]

    def live_generation(self, bucket: str, name: str) -> int:
        """The object's generation, 0 when there is no such object."""
        if not os.path.isfile(self._path(bucket, name)):
            return 0
        try:
            with open(self._meta_path(bucket, name), encoding="utf-8") as handle:
                return int(json.load(handle).get("generation") or 1)
        except (OSError, ValueError):
            return 1

    def check_generation(self, bucket: str, name: str, if_generation_match: int | None) -> None:
        """412 unless the live generation is `if_generation_match` (None: no condition)."""
        if if_generation_match is None:
            return
        if self.live_generation(bucket, name) != int(if_generation_match):
            raise StoreError(412, PRECONDITION_FAILED)

    def put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        *,
        custom_time: str | None = None,
        mtime: float | None = None,
        if_generation_match: int | None = None,
    ) -> dict[str, Any]:
        """Write the object (whole, or not at all); its stored record (see `meta`)."""
        path = self._path(bucket, name)
        self.apply_fault("put", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.upload"
        with open(tmp, "wb") as handle:
            handle.write(data)
        try:
            with self._locked():
                self.check_generation(bucket, name, if_generation_match)
                previous = self.live_generation(bucket, name)
                os.replace(tmp, path)
                now = time.time()
                meta: dict[str, Any] = {"updated": now, "created": now}  # a new object
                meta["generation"] = max(time.time_ns() // 1000, previous + 1)
                meta["metageneration"] = 1
                if custom_time:
                    meta["customTime"] = custom_time
                if mtime is not None:
                    meta["mtime"] = int(mtime)
                self._write_json(self._meta_path(bucket, name), meta)
                with open(os.path.join(self.root, UPLOADS), "a", encoding="utf-8") as log:
                    log.write(json.dumps({"bucket": bucket, "name": name, "time": now}) + "\n")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return self.meta(bucket, name)

    def uploads(self, bucket: str | None = None) -> list[dict[str, Any]]:
        """Every object write so far (oldest first), in this bucket or all."""
        try:
            with open(os.path.join(self.root, UPLOADS), encoding="utf-8") as log:
                lines = [json.loads(line) for line in log if line.strip()]
        except OSError:
            return []
        return [u for u in lines if bucket is None or u["bucket"] == bucket]

    def set_custom_time(self, bucket: str, name: str, custom_time: str) -> None:
        with self._locked():
            meta = self.meta(bucket, name)
            old = meta.get("customTime")
            if old and custom_time < old:
                raise StoreError(400, "Custom time cannot be decreased.")
            stored = {
                k: v for k, v in meta.items() if k not in ("name", "bucket", "size", "md5Hash")
            }
            stored["customTime"] = custom_time
            stored["metageneration"] = int(stored.get("metageneration") or 1) + 1
            self._write_json(self._meta_path(bucket, name), stored)

    def names(self, bucket: str, prefix: str = "") -> list[str]:
        base = os.path.join(self.root, bucket)
        if not os.path.isdir(base):
            raise StoreError(404, f"The specified bucket does not exist: {bucket}")
        names = []
        for folder, _dirs, files in os.walk(base):
            for file in files:
                if file.endswith(".upload"):
                    continue
                name = os.path.relpath(os.path.join(folder, file), base).replace(os.sep, "/")
                if name.startswith(prefix):
                    names.append(name)
        return sorted(names)

    def delete(self, bucket: str, name: str) -> None:
        with self._locked():
            os.unlink(self._path(bucket, name))
            if os.path.exists(self._meta_path(bucket, name)):
                os.unlink(self._meta_path(bucket, name))
