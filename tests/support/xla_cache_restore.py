"""A generation of the compile cache saved in the loopback fake of the Cloud Storage JSON API, and
a fresh node's restore of it by the node tool in this process (`fetch`, then `install` as the GKE
init container runs it: `--in-pod`, the image named by digest), for the tests of the restore's
download pool and of its retries. The `bucket` fixture (tests/loopback/conftest.py) saves it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.compile_cache import generation_name
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.xla_cache_tool import load_tool

BUCKET = "b"
PREFIX = f"gs://{BUCKET}/xla-cache/KEY/"
IMAGE = "docker.io/vllm/vllm-tpu@sha256:" + "ab12" * 16
MTIME = 1_700_000_000
#: Mixed sizes, as a JAX cache has them: many small entries, a few over the tool's 1 MiB block.
SIZES = [700 + 37_000 * i for i in range(22)] + [2_500_000, 1_300_000]


@dataclass
class Bucket:
    api: FakeGcsApi
    store: GcsStore
    entries: dict[str, bytes]

    @property
    def generation(self) -> str:
        return generation_name(IMAGE)

    def key(self, name: str) -> str:
        return f"xla-cache/KEY/{self.generation}/{name}"

    def object_gets(self) -> list[str]:
        """The cache entries the tool downloaded (not LATEST, not the manifest)."""
        return [
            r["path"]
            for r in self.api.requests
            if r["method"] == "GET" and r["path"].endswith("-cache?alt=media")
        ]


def restore(tmp_path: Path, timeout: float = 60, tool: Any = None) -> dict[str, Any]:
    """`fetch` then `install` on a fresh node (a new process each: a fresh module)."""
    work, cache = tmp_path / "work", tmp_path / "xla_cache"
    common = ["--work", str(work), "--prefix", PREFIX, "--timeout", str(timeout)]
    assert (tool or load_tool()).main(["fetch", *common]) == 0
    install = [*common, "--dir", str(cache), "--in-pod", "--image", IMAGE]
    assert load_tool().main(["install", *install]) == 0
    return dict(json.loads((work / "result.json").read_text()))
