"""What every part of the node's compile-cache tool (scripts/remote/xla_cache.py) shares."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import sys
import time
from typing import Any

MANIFEST = "MANIFEST.json"
LATEST = "LATEST"
# `-atime` stamps change on every read (jax/_src/lru_cache.py): not worth carrying.
SKIP_SUFFIXES = ("-atime", ".tmp", ".lock")
#: gcloud storage's own key (posix_util.py MTIME_METADATA_KEY): each transport sees the other's.
MTIME_KEY = "goog-reserved-file-mtime"
#: A file that changed within this pause may still be growing (a lazy compile after ready).
SETTLE_SECONDS = 1.0
DEFAULT_SAVE_TIMEOUT = 1800.0
#: A transfer worker checks the deadline between pieces of this size.
BLOCK = 1 << 20


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


def rfc3339_seconds(text: str) -> float | None:
    """Epoch seconds, to compare as numbers: the service may answer with fewer fraction digits."""
    if not text:
        return None
    main, _, rest = text.rstrip("Z").partition(".")
    try:
        stamp = dt.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)  # noqa: UP017
        fraction = float(f"0.{rest}") if rest.isdigit() else 0.0
    except ValueError:
        return None
    return stamp.timestamp() + fraction


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
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digests(path: str) -> tuple[int, str, str]:
    """(size, sha256 hex, md5 base64): the md5 is the one a listing shows (`md5Hash`)."""
    sha = hashlib.sha256()
    md5 = hashlib.md5()  # noqa: S324 - Cloud Storage's own checksum, not security
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            sha.update(block)
            md5.update(block)
            size += len(block)
    return size, sha.hexdigest(), base64.b64encode(md5.digest()).decode()


def local_files(root: str, settle: float = 0.0) -> dict[str, str]:
    """{relative path: absolute path} of the cache entries under root.

    JAX writes an entry in place (jax/_src/lru_cache.py): with `settle`, a file whose size or
    mtime changed across the pause is still being written and waits for the next save.
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


def paths(work: str) -> dict[str, str]:
    return {
        "fetch": os.path.join(work, "fetch.json"),
        "state": os.path.join(work, "state.json"),
        "result": os.path.join(work, "result.json"),
        "staging": os.path.join(work, "staging"),
        "save": os.path.join(work, "save.json"),
    }
