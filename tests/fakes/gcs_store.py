"""A Cloud Storage bucket kept in a local directory: what the fake `gcloud storage` and the fake
JSON API (tests/fakes/gcs_api.py) both read and write, and what tests inspect.

Layout under the root (``FAKE_GCS_ROOT`` on the SSH "VM")::

    <bucket>/<object name>               the object's bytes
    .meta/<bucket>/<object name>.json    {"customTime", "mtime", "md5Hash", "crc32c"?, "updated",
                                          "created"}
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
Stdlib only, Python 3.9+: the fake gcloud runs it under the system python3.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from typing import Any

FAULTS = "faults.json"
META = ".meta"
UPLOADS = "uploads.jsonl"


class StoreError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class GcsStore:
    def __init__(self, root: str) -> None:
        self.root = root

    # -- test knobs -----------------------------------------------------------------------
    def create_bucket(self, bucket: str) -> None:
        os.makedirs(os.path.join(self.root, bucket), exist_ok=True)
        os.makedirs(os.path.join(self.root, META, bucket), exist_ok=True)
        with open(os.path.join(self.root, UPLOADS), "a", encoding="utf-8"):
            pass

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
            md5Hash=base64.b64encode(hashlib.md5(data).digest()).decode(),  # noqa: S324
        )
        return stored

    def put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        *,
        custom_time: str | None = None,
        mtime: float | None = None,
    ) -> None:
        path = self._path(bucket, name)
        self.apply_fault("put", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.upload"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        now = time.time()
        meta: dict[str, Any] = {"updated": now, "created": now}  # a new object each time
        if custom_time:
            meta["customTime"] = custom_time
        if mtime is not None:
            meta["mtime"] = int(mtime)
        self._write_json(self._meta_path(bucket, name), meta)
        with open(os.path.join(self.root, UPLOADS), "a", encoding="utf-8") as log:
            log.write(json.dumps({"bucket": bucket, "name": name, "time": now}) + "\n")

    def uploads(self, bucket: str | None = None) -> list[dict[str, Any]]:
        """Every object write so far (oldest first), in this bucket or all."""
        try:
            with open(os.path.join(self.root, UPLOADS), encoding="utf-8") as log:
                lines = [json.loads(line) for line in log if line.strip()]
        except OSError:
            return []
        return [u for u in lines if bucket is None or u["bucket"] == bucket]

    def set_custom_time(self, bucket: str, name: str, custom_time: str) -> None:
        meta = self.meta(bucket, name)
        old = meta.get("customTime")
        if old and custom_time < old:
            raise StoreError(400, "Custom time cannot be decreased.")
        stored = {k: v for k, v in meta.items() if k not in ("name", "bucket", "size", "md5Hash")}
        stored["customTime"] = custom_time
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
        os.unlink(self._path(bucket, name))
        if os.path.exists(self._meta_path(bucket, name)):
            os.unlink(self._meta_path(bucket, name))
