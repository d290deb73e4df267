"""Benchmark: how fast the node tool restores a compile cache over the JSON API (run by hand).

    python -m benchmarks.restore_speed [--entries 300] [--mb 197] [--workers 1,16]
                                        [--latency 0,0.03] [--runs 3]

The cache has seed 000's size (197 MB for E2B, "The JAX compile cache lives there (197 MB
measured)") in a few hundred entries of mixed size: drawn log-uniform from 2 KiB to 8 MiB,
then scaled to the total, so most entries are small helpers and a few are big forwards. It is
stored as a node's save leaves it (entries, MANIFEST.json, LATEST) in the loopback fake of the
Cloud Storage JSON API (tests/support/fakes/gcs_api.py, a Python HTTP server, one thread per
request) and restored by scripts/remote/xla_cache.py `fetch` + `install` in their own processes, as
on a node, once per pool size (`TPU_VLLM_CACHE_WORKERS`; 1 = the serial download this tool had
before) and per latency.

`--latency` delays every answer of the fake by that many seconds: a stand-in for a Cloud Storage
round trip before the first byte. 0 is loopback only; 0.03 is an assumed 30 ms, not a measured
Cloud Storage figure. Reported per setting (median of `--runs`): the download's own MB/s (the
tool's log line), the whole restore's wall time and MB/s (both processes, `fetch` + `install`,
which also checks every entry against the manifest and copies it into the cache directory) and
the most downloads the fake saw in flight at once. Not a test: the figures depend on this
machine (here: 2 shared cores running both the fake and the tool), and Cloud Storage is not a
Python loopback server.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from components.compile_cache import generation_name
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.xla_cache_tool import TOOL

BUCKET = "bench"
PREFIX = f"gs://{BUCKET}/xla-cache/KEY/"
IMAGE = "docker.io/vllm/vllm-tpu@sha256:" + "5e" * 32
#: Seed 000 §1.3: "The JAX compile cache lives there (197 MB measured)" (E2B on a v5e-1).
SEED_000_MB = 197.0
DOWNLOADED = re.compile(r"downloaded \d+ objects \(([\d.]+) MB\) .* in ([\d.]+)s, ([\d.]+) MB/s")


def sizes(entries: int, total_bytes: int, seed: int = 0) -> list[int]:
    """Drawn log-uniform from 2 KiB to 8 MiB, then scaled to add up to `total_bytes`."""
    rng = random.Random(seed)
    raw = [2 ** rng.uniform(11, 23) for _ in range(entries)]
    scale = total_bytes / sum(raw)
    return [max(1, int(r * scale)) for r in raw]


def seed_bucket(store: GcsStore, entries: int, total_bytes: int) -> list[int]:
    """A saved generation: the entries, MANIFEST.json, then LATEST (as `save` writes them)."""
    store.create_bucket(BUCKET)
    generation = generation_name(IMAGE)
    manifest = {}
    made = sizes(entries, total_bytes)
    for index, size in enumerate(made):
        name = f"jit_step_{index:03d}-{index:064x}-cache"
        data = os.urandom(size)
        store.put(BUCKET, f"xla-cache/KEY/{generation}/{name}", data, mtime=1_700_000_000)
        manifest[name] = {"size": size, "sha256": hashlib.sha256(data).hexdigest()}
    body = json.dumps({"files": manifest}).encode()
    store.put(BUCKET, f"xla-cache/KEY/{generation}/MANIFEST.json", body)
    store.put(BUCKET, "xla-cache/KEY/LATEST", generation.encode())
    return made


def tool_env(api: FakeGcsApi, metadata: FakeMetadataServer, workers: int) -> dict[str, str]:
    """The node tool's environment: the JSON API, this pool size, the loopback endpoints."""
    return {
        **os.environ,
        "TPU_VLLM_CACHE_VIA": "api",
        "TPU_VLLM_CACHE_WORKERS": str(workers),
        "STORAGE_API_ENDPOINT": api.url,
        "GCE_METADATA_HOST": metadata.host,
    }


def restore_once(
    api: FakeGcsApi, metadata: FakeMetadataServer, node: Path, workers: int
) -> dict[str, Any]:
    """A fresh node's `fetch` then `install`, each its own process."""
    env = tool_env(api, metadata, workers)
    work, cache = node / "work", node / "xla_cache"
    common = ["--work", str(work), "--prefix", PREFIX, "--timeout", "600"]
    api.reset_counts()
    logs = ""
    began = time.monotonic()
    for args in (["fetch", *common], ["install", *common, "--dir", str(cache), "--in-pod",
                                      "--image", IMAGE]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(TOOL), *args], env=env, capture_output=True, text=True, check=False
        )
        logs += done.stderr
        if done.returncode:
            raise SystemExit(f"{args[0]} failed:\n{done.stderr}")
    wall = time.monotonic() - began
    result = dict(json.loads((work / "result.json").read_text()))
    if not result.get("restored") or result.get("reason"):
        raise SystemExit(f"the restore was not clean: {result}\n{logs}")
    match = DOWNLOADED.search(logs)
    if not match:
        raise SystemExit(f"no download summary in the tool's log:\n{logs}")
    shutil.rmtree(node)
    return {
        "download_mb_s": float(match.group(3)),
        "download_s": float(match.group(2)),
        "restore_s": wall,
        "bytes": int(result["bytes"]),
        "files": int(result["files"]),
        "in_flight": api.max_media_in_flight,
    }


def arguments(doc: str | None) -> argparse.Namespace:
    """The options both transfer benchmarks take (this one and benchmarks/save_speed.py)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--mb", type=float, default=SEED_000_MB)
    parser.add_argument("--workers", default="1,16", help="pool sizes, comma-separated")
    parser.add_argument("--latency", default="0,0.03", help="seconds per request, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    return parser.parse_args()


def describe(made: list[int], runs: int) -> str:
    return (
        f"cache: {len(made)} entries, {sum(made) / 1e6:.0f} MB, "
        f"{min(made) / 1024:.1f} KiB to {max(made) / 2**20:.1f} MiB "
        f"(median {statistics.median(made) / 1024:.0f} KiB); {runs} runs each, medians"
    )


def sweep(
    api: FakeGcsApi,
    args: argparse.Namespace,
    measure: Callable[[int, str], dict[str, Any]],
    rate_key: str,
    row: Callable[[float, int, list[dict[str, Any]], float], str],
) -> None:
    """For each latency and pool size, `args.runs` measurements (`measure(workers, run id)`);
    a row of their medians (`row(latency, workers, runs, median rate)`) and the ratio of the
    median `rate_key` to the one-at-a-time figure."""
    for latency in [float(x) for x in args.latency.split(",")]:
        api.latency = latency
        serial = 0.0
        for workers in [int(w) for w in args.workers.split(",")]:
            runs = [measure(workers, f"{latency}-{workers}-{run}") for run in range(args.runs)]
            rate = statistics.median(r[rate_key] for r in runs)
            if workers == 1:
                serial = rate
            ratio = f" ({rate / serial:.1f}x serial)" if serial and workers != 1 else ""
            print(row(latency, workers, runs, rate) + ratio, flush=True)


@contextlib.contextmanager
def loopback(prefix: str) -> Iterator[tuple[Path, FakeGcsApi, FakeMetadataServer]]:
    """A scratch directory, the fake JSON API over a bucket in it, and the metadata server."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    metadata = FakeMetadataServer().start()
    api = FakeGcsApi(root / "gcs", token=metadata.access_token).start()
    try:
        yield root, api, metadata
    finally:
        api.stop()
        metadata.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    args = arguments(__doc__)
    with loopback("tpu-vllm-bench-restore-") as (root, api, metadata):
        made = seed_bucket(api.store, args.entries, int(args.mb * 1e6))
        print(describe(made, args.runs), flush=True)
        print(
            f"{'latency':>8} {'workers':>7} {'download MB/s':>14} {'restore s':>10} "
            f"{'restore MB/s':>13} {'in flight':>9}"
        )

        def row(latency: float, workers: int, runs: list[dict[str, Any]], rate: float) -> str:
            restore_s = statistics.median(r["restore_s"] for r in runs)
            total = runs[0]["bytes"] / 1e6
            return (
                f"{latency * 1000:>6.0f}ms {workers:>7} {rate:>14.1f} {restore_s:>10.2f} "
                f"{total / max(restore_s, 1e-3):>13.1f} "
                f"{max(r['in_flight'] for r in runs):>9}"
            )

        sweep(
            api, args,
            lambda workers, run: restore_once(api, metadata, root / f"node-{run}", workers),
            "download_mb_s", row,
        )  # fmt: skip


if __name__ == "__main__":
    main()
