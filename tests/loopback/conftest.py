"""Fixtures shared by the loopback tests of the compile cache's node tool
(tests/loopback/test_xla_cache_*.py): a bucket with a saved generation to restore from, and an
empty one for saves.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.compile_cache import generation_name
from tests.support import xla_cache_save
from tests.support.fakes.gcs_api import QUICK_RETRIES, FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.xla_cache_restore import BUCKET, IMAGE, MTIME, SIZES, Bucket


@pytest.fixture
def bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_metadata: FakeMetadataServer
) -> Iterator[Bucket]:
    """A saved generation (entries, MANIFEST.json, LATEST), as a node's save leaves it, and the
    restore's environment pointed at it."""
    root = tmp_path / "gcs"
    store = GcsStore(str(root))
    store.create_bucket(BUCKET)
    entries = {f"jit_step_{i:02d}-{i:064x}-cache": os.urandom(size) for i, size in enumerate(SIZES)}
    generation = generation_name(IMAGE)
    manifest = {}
    for name, data in entries.items():
        store.put(BUCKET, f"xla-cache/KEY/{generation}/{name}", data, mtime=MTIME)
        manifest[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    store.put(
        BUCKET,
        f"xla-cache/KEY/{generation}/MANIFEST.json",
        json.dumps({"files": manifest}).encode(),
    )
    store.put(BUCKET, "xla-cache/KEY/LATEST", generation.encode())
    api = FakeGcsApi(root, token=fake_metadata.access_token).start()
    monkeypatch.setenv("TPU_VLLM_CACHE_VIA", "api")
    monkeypatch.setenv("STORAGE_API_ENDPOINT", api.url)
    monkeypatch.setenv("GCE_METADATA_HOST", fake_metadata.host)
    monkeypatch.delenv("TPU_VLLM_CACHE_WORKERS", raising=False)
    for name, value in QUICK_RETRIES.items():
        monkeypatch.setenv(name, value)
    try:
        yield Bucket(api, store, entries)
    finally:
        api.stop()


@pytest.fixture
def cloud(tmp_path: Path, fake_metadata: FakeMetadataServer) -> Iterator[xla_cache_save.Cloud]:
    """An empty bucket, and the environment a save into it runs with."""
    root = tmp_path / "gcs"
    store = GcsStore(str(root))
    store.create_bucket(xla_cache_save.BUCKET)
    api = FakeGcsApi(root, token=fake_metadata.access_token).start()
    env = {
        "PATH": os.environ["PATH"],
        "TPU_VLLM_CACHE_VIA": "api",
        "STORAGE_API_ENDPOINT": api.url,
        "GCE_METADATA_HOST": fake_metadata.host,
        **QUICK_RETRIES,
    }
    try:
        yield xla_cache_save.Cloud(api, store, env)
    finally:
        api.stop()
