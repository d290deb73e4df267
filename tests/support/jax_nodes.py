"""Nodes that run real JAX and share one compile-cache bucket through the node tool, for the
real-JAX test of the compile cache (tests/loopback/test_jax_compile_cache.py) and its benchmark
(benchmarks/xla_cache_jax.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.xla_cache_tool import TOOL

SUPPORT = Path(__file__).resolve().parent
#: The JAX side of a server start, run as a process of its own.
JAX_START = SUPPORT / "jax_start.py"
FAKE_BIN = SUPPORT / "fakes" / "bin"
#: The image the nodes run, named by digest (the tool's `install` then needs no docker).
IMAGE = "vllm/vllm-tpu@sha256:" + "ef01" * 16
#: The in-container cache directory (vLLM's VLLM_XLA_CACHE_PATH default, as root).
CONTAINER_CACHE = "root/.cache/vllm/xla_cache"


@dataclass
class Bucket:
    api: FakeGcsApi
    metadata: FakeMetadataServer
    prefix: str
    #: The local store behind both fakes (`FAKE_GCS_ROOT` of the fake gcloud).
    root: Path
    #: `api` (the JSON API) or `gcloud` (`gcloud storage`): TPU_VLLM_CACHE_VIA.
    via: str = "api"

    def tool(self, command: str, work: Path, *args: str) -> None:
        """The node tool as cache_restore.sh / cache_save.sh run it."""
        done = subprocess.run(
            ["python3", str(TOOL), command, "--work", str(work), *args],
            env={
                "PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}",
                "FAKE_GCS_ROOT": str(self.root),
                "TPU_VLLM_CACHE_VIA": self.via,
                "STORAGE_API_ENDPOINT": self.api.url,
                "GCE_METADATA_HOST": self.metadata.host,
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def restore(self, work: Path, cache_dir: Path) -> dict[str, Any]:
        self.tool("fetch", work, "--prefix", self.prefix, "--timeout", "60")
        self.tool(
            "install", work, "--prefix", self.prefix, "--timeout", "60", "--dir", str(cache_dir),
            "--image", IMAGE,
        )  # fmt: skip
        return dict(json.loads((work / "result.json").read_text()))

    def save(self, work: Path) -> dict[str, Any]:
        self.tool("save", work)
        summary = work / "save.json"
        if not summary.exists():  # the tool found nothing to save
            return {"ok": False, "uploaded": 0}
        return dict(json.loads(summary.read_text()))
