"""The stand-ins' "cloud": what exists, kept on disk so it outlives each provider process.

The engine starts a new provider process for every Pulumi operation; a real provider finds what it
made in the cloud. Here that is one JSON file per kind of object (`compute_firewalls.json`, ...)
under the directory named by `TPU_VLLM_STANDIN_STATE`, each a map of the object's id to its
fields as the API would answer them. Writes hold an exclusive `fcntl.flock` on the kind's lock
file (the engine runs steps in parallel, in one process or several) and replace the file
atomically, so a reader never sees half a write. Tests seed objects a user would have made by
hand (a DNS zone, an existing GKE cluster) with `Store.put`, and read the files to check that
`pulumi destroy` left nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_ENV = "TPU_VLLM_STANDIN_STATE"


class StoreError(RuntimeError):
    pass


def state_dir() -> Path:
    value = os.environ.get(STATE_ENV, "").strip()
    if not value:
        raise StoreError(
            f"{STATE_ENV} is not set: the stand-in providers keep what they create in that "
            "directory (tests/support/standins/store.py). Set it to a directory of your choice."
        )
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Store:
    """One kind of object: id -> fields."""

    def __init__(self, kind: str, root: Path | None = None) -> None:
        self.kind = kind
        self.root = root if root is not None else state_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / f"{kind}.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / f".{self.kind}.lock", "a", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        if not isinstance(data, dict):
            raise StoreError(f"{self.path} does not hold a JSON object")
        return data

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def all(self) -> dict[str, Any]:
        with self._locked():
            return self._load()

    def get(self, key: str) -> Any | None:
        return self.all().get(key)

    def put(self, key: str, value: Any) -> None:
        with self._locked():
            data = self._load()
            data[key] = value
            self._save(data)

    def insert(self, key: str, value: Any) -> bool:
        """Add `key` unless it exists (an API's 409): False when it was already there."""
        with self._locked():
            data = self._load()
            if key in data:
                return False
            data[key] = value
            self._save(data)
            return True

    def delete(self, key: str) -> bool:
        with self._locked():
            data = self._load()
            if key not in data:
                return False
            del data[key]
            self._save(data)
            return True


def everything(root: Path) -> dict[str, dict[str, Any]]:
    """Every kind in a state directory that still holds an object (for "destroy left nothing")."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data:
            found[path.stem] = data
    return found
