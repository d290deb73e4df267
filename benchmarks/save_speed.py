"""Benchmark: how fast the node tool saves a compile cache over the JSON API, beside how fast it
restores the same cache (run by hand).

    python -m benchmarks.save_speed [--entries 300] [--mb 197] [--workers 1,16]
                                     [--latency 0,0.03] [--runs 3]

The cache is benchmarks/restore_speed.py's: seed 000's size (197 MB for E2B) in a few hundred
entries of mixed size (log-uniform 2 KiB to 8 MiB, scaled to the total). Each run is a cold
node's first save into an empty generation (scripts/remote/xla_cache.py `save`, a process of
its own, as the readiness command starts it: every entry uploaded in the bounded pool, then
MANIFEST.json, LATEST and the custom times), then a fresh node's restore of what it saved
(`fetch` + `install`). Per pool size (`TPU_VLLM_CACHE_WORKERS`; 1 = one request at a time) and
latency (`--latency`: seconds the loopback fake waits before each answer, a stand-in for a
Cloud Storage round trip; 0.03 is an assumed 30 ms, not a measured figure), medians of
`--runs`: the upload's MB/s (the tool's `uploaded ... MB/s` line), the whole save's seconds
(scanning and hashing the directory, listing, the manifest and LATEST with their preconditions,
the custom times), and the restore's download MB/s beside them. Not a test: the figures depend
on this machine (2 shared cores running the fake and the tool), and Cloud Storage is not a
Python loopback server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.restore_speed import (
    DOWNLOADED,
    arguments,
    describe,
    loopback,
    sizes,
    sweep,
    tool_env,
)
from components.compile_cache import generation_name
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.xla_cache_tool import TOOL

BUCKET = "bench"
IMAGE = "docker.io/vllm/vllm-tpu@sha256:" + "5e" * 32
UPLOADED = re.compile(r"uploaded \d+ objects \(([\d.]+) MB\) .* in ([\d.]+)s, ([\d.]+) MB/s")
OLD = 1_700_000_000


def make_cache(folder: Path, made: list[int]) -> None:
    """JAX's entries as a cold start leaves them (complete: older than the settle pause)."""
    folder.mkdir(parents=True)
    for index, size in enumerate(made):
        path = folder / f"jit_step_{index:03d}-{index:064x}-cache"
        path.write_bytes(os.urandom(size))
        os.utime(path, (OLD, OLD))


def tool(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(TOOL), *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr}")
    return done.stderr


def save_then_restore(
    api: FakeGcsApi,
    metadata: FakeMetadataServer,
    root: Path,
    cache: Path,
    *,
    workers: int,
    run: str,
) -> dict[str, Any]:
    """A cold node's save into an empty generation, then a fresh node's restore of it."""
    env = tool_env(api, metadata, workers)
    prefix = f"gs://{BUCKET}/xla-cache/{run}/"
    saver = root / f"saver-{run}"
    state = {"prefix": prefix, "generation": generation_name(IMAGE), "dir": str(cache)}
    saver.mkdir()
    (saver / "state.json").write_text(json.dumps(state))
    api.reset_counts()
    began = time.monotonic()
    logs = tool(env, "save", "--work", str(saver))
    save_s = time.monotonic() - began
    uploaded = UPLOADED.search(logs)
    summary = json.loads((saver / "save.json").read_text())
    if not uploaded or not summary.get("ok"):
        raise SystemExit(f"the save was not clean: {summary}\n{logs}")
    in_flight = api.max_uploads_in_flight
    node = root / f"restorer-{run}"
    common = ["--work", str(node / "work"), "--prefix", prefix, "--timeout", "600"]
    logs = tool(env, "fetch", *common)
    logs += tool(env, "install", *common, "--dir", str(node / "xla_cache"), "--in-pod",
                 "--image", IMAGE)  # fmt: skip
    downloaded = DOWNLOADED.search(logs)
    result = json.loads((node / "work" / "result.json").read_text())
    if not downloaded or not result.get("restored") or result.get("reason"):
        raise SystemExit(f"the restore was not clean: {result}\n{logs}")
    shutil.rmtree(node)
    shutil.rmtree(saver)
    for folder in (Path(api.store.root) / BUCKET, Path(api.store.root) / ".meta" / BUCKET):
        shutil.rmtree(folder / "xla-cache" / run, ignore_errors=True)
    return {
        "upload_mb_s": float(uploaded.group(3)),
        "save_s": save_s,
        "download_mb_s": float(downloaded.group(3)),
        "in_flight": in_flight,
        "bytes": int(summary["bytes"]),
    }


def main() -> None:
    args = arguments(__doc__)
    with loopback("tpu-vllm-bench-save-") as (root, api, metadata):
        api.store.create_bucket(BUCKET)
        made = sizes(args.entries, int(args.mb * 1e6))
        cache = root / "xla_cache"
        make_cache(cache, made)
        print(describe(made, args.runs), flush=True)
        print(
            f"{'latency':>8} {'workers':>7} {'upload MB/s':>12} {'save s':>7} "
            f"{'save MB/s':>10} {'in flight':>9} {'restore MB/s':>13}"
        )

        def row(latency: float, workers: int, runs: list[dict[str, Any]], rate: float) -> str:
            save_s = statistics.median(r["save_s"] for r in runs)
            download = statistics.median(r["download_mb_s"] for r in runs)
            return (
                f"{latency * 1000:>6.0f}ms {workers:>7} {rate:>12.1f} {save_s:>7.2f} "
                f"{runs[0]['bytes'] / 1e6 / max(save_s, 1e-3):>10.1f} "
                f"{max(r['in_flight'] for r in runs):>9} {download:>13.1f}"
            )

        def measure(workers: int, run: str) -> dict[str, Any]:
            name = "R" + run.replace(".", "_")
            return save_then_restore(api, metadata, root, cache, workers=workers, run=name)

        sweep(api, args, measure, "upload_mb_s", row)


if __name__ == "__main__":
    main()
