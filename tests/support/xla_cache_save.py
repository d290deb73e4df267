"""Nodes that save the compile cache into one bucket of the loopback fake of the Cloud Storage JSON
API: each a work directory whose state.json is what its restore recorded and a cache directory with
JAX's `*-cache` entries, each save a process of its own (the node tool, as cache_save.sh and the
GKE sidecar run it). The `cloud` fixture (tests/loopback/conftest.py) serves the bucket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.compile_cache import generation_name
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.xla_cache_tool import TOOL

BUCKET = "b"
KEY = "xla-cache/KEY/"
PREFIX = f"gs://{BUCKET}/{KEY}"
IMAGE = "docker.io/vllm/vllm-tpu@sha256:" + "5a" * 32
GENERATION = generation_name(IMAGE)
OLD = 1_700_000_000  # an mtime well before the save's settle pause


@dataclass
class Cloud:
    api: FakeGcsApi
    store: GcsStore
    env: dict[str, str]

    def manifest(self) -> dict[str, Any]:
        raw = self.store.get(BUCKET, f"{KEY}{GENERATION}/MANIFEST.json")
        return dict(json.loads(raw)["files"])

    def objects(self) -> dict[str, bytes]:
        names = self.store.names(BUCKET, f"{KEY}{GENERATION}/")
        found = {n.rsplit("/", 1)[-1]: self.store.get(BUCKET, n) for n in names}
        return {n: data for n, data in found.items() if n.endswith("-cache")}

    def latest(self) -> bytes | None:
        if not self.store.exists(BUCKET, f"{KEY}LATEST"):
            return None
        return self.store.get(BUCKET, f"{KEY}LATEST")


@dataclass
class Node:
    root: Path
    cloud: Cloud
    entries: dict[str, bytes] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def cache(self) -> Path:
        return self.root / "xla_cache"

    def __post_init__(self) -> None:
        self.cache.mkdir(parents=True)
        state = {"prefix": PREFIX, "generation": GENERATION, "dir": str(self.cache)}
        self.work.mkdir(parents=True)
        (self.work / "state.json").write_text(json.dumps(state))

    def add(self, entries: dict[str, bytes]) -> None:
        """JAX wrote these entries (complete: older than the save's settle pause)."""
        for name, data in entries.items():
            (self.cache / name).write_bytes(data)
            os.utime(self.cache / name, (OLD, OLD))
        self.entries.update(entries)

    def start(self, command: str, *args: str, workers: int = 16) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(TOOL), command, "--work", str(self.work), *args],
            env={**self.cloud.env, "TPU_VLLM_CACHE_WORKERS": str(workers)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def save(self, *args: str, workers: int = 16) -> tuple[int, dict[str, Any], str]:
        done = self.start("save", *args, workers=workers)
        _, err = done.communicate(timeout=120)
        return done.returncode, self.summary(), err

    def summary(self) -> dict[str, Any]:
        path = self.work / "save.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}


def entries(tag: str, count: int, size: int = 3000) -> dict[str, bytes]:
    return {f"jit_{tag}_{i:02d}-{i:064x}-cache": os.urandom(size + i) for i in range(count)}
