"""Benchmark: what caching every compile saves a fresh node, with real JAX on CPU (run by hand).

    python -m benchmarks.xla_cache_jax [--runs 3] [--layers 24] [--entries 300] [--mb 197]

Not part of the default suite (pytest collects only `tests/`), because timings depend on the
machine. Two parts, in one run:

1. Time to first result of a server start (tests/support/jax_start.py `transformer`: a small decoder
   forward, the logits gather and the sampler at the padding buckets tpu-inference
   precompiles), each in a fresh process, on a fresh "node" whose cache directory is the same
   absolute path every time (JAX before 0.11.0 keys entries on it):
   - cold:                  empty cache, JAX's default threshold (1.0 s): today's cold start;
   - restored, threshold 1: a fresh node after a cold start at the default saved its cache;
   - cold, every compile:   empty cache, the program's rendered environment (threshold 0);
   - restored, every:       a fresh node after that cold start saved.
   Save and restore are the project's node tool (scripts/remote/xla_cache.py `fetch`,
   `install`, `save`) over the Cloud Storage JSON API against the loopback fake
   (tests/support/fakes/gcs_api.py). Reported as medians and ratios to the cold start.
2. Restore speed: a synthetic cache of seed 000's size (197 MB for E2B) in a few hundred
   entries of mixed size, saved by the tool, then restored on a fresh node (`fetch` +
   `install`, the JSON API path): MB/s, and the most downloads the fake saw in flight at once.
   Whatever the tool does (one by one, or a bounded pool) is what is measured.

CPU only: the TPU figure (seed 000: 857 s cold, 685 s of it compiling, 497 s restarted with the
cache) is confirmed only on a TPU. The fake is a Python HTTP server on loopback: it bounds the
speed from above by its own cost, so MB/s here is a floor for the tool, not GCS's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import seed_facts
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.jax_nodes import CONTAINER_CACHE, JAX_START, Bucket
from tests.support.jax_start import DEFAULT_LAYERS
from tests.support.pulumi_program import run_program
from tests.support.remote_stack import docker_run_env, start_text

BUCKET = "bench-xla-cache"
#: Seed 000 §1.3: "The JAX compile cache lives there (197 MB measured)" (E2B on a v5e-1).
SEED_CACHE_MB = float(seed_facts.figure("compile_cache_mb"))


@contextmanager
def loopback_bucket(root: Path) -> Iterator[tuple[FakeGcsApi, FakeMetadataServer]]:
    metadata = FakeMetadataServer().start()
    api = FakeGcsApi(root, token=metadata.access_token).start()
    GcsStore(str(root)).create_bucket(BUCKET)
    try:
        yield api, metadata
    finally:
        api.stop()
        metadata.stop()


def timed_start(cache: Path, env: dict[str, str], layers: int) -> dict[str, Any]:
    """One start's JAX side in a fresh process: `wall` is spawn to exit (interpreter, imports,
    compiles, runs), `cpu` the process's user + system seconds. On a shared machine the CPU
    seconds are the steadier measure: other processes stretch the wall time, not those."""
    argv = [sys.executable, str(JAX_START), "--cache-dir", str(cache), "--workload",
            "transformer", "--layers", str(layers)]  # fmt: skip
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.monotonic()
        proc = subprocess.Popen(argv, env={"PATH": os.environ["PATH"], **env}, stdout=out,
                                stderr=err)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(err.read().decode(errors="replace"))
        result = json.loads(out.read().decode().splitlines()[-1])
    return {**result, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime}


def cold_then_restored(
    bucket: Bucket, home: Path, env: dict[str, str], layers: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Node 1 cold (restore finds nothing), compiles, saves; its disk goes; node 2 restores
    into the same path and starts. (cold start, restore result, restored start)."""
    cache = home / CONTAINER_CACHE
    bucket.restore(home / "node1", cache)
    cold = timed_start(cache, env, layers)
    saved = bucket.save(home / "node1")
    if cold["entries"] and not saved.get("ok"):
        raise SystemExit(f"the save failed: {saved}")
    shutil.rmtree(home / "node1")
    shutil.rmtree(home / "root", ignore_errors=True)
    restore = bucket.restore(home / "node2", cache)
    warm = timed_start(cache, env, layers)
    shutil.rmtree(home / "node2")
    shutil.rmtree(home / "root", ignore_errors=True)
    return cold, restore, warm


def start_times(runs: int, layers: int) -> dict[str, list[dict[str, Any]]]:
    every_env = docker_run_env(start_text(run_program("v5e1")))  # what a node runs with
    scenarios: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("cold", "restored_default", "cold_every", "restored_every")
    }
    for run in range(runs):
        root = Path(tempfile.mkdtemp(prefix="tpu-vllm-bench-jax-"))
        try:
            with loopback_bucket(root / "gcs") as (api, metadata):
                for label, env in (("default", {}), ("every", every_env)):
                    prefix = f"gs://{BUCKET}/xla-cache/{label}/"
                    bucket = Bucket(api, metadata, prefix, root / "gcs")
                    cold, restore, warm = cold_then_restored(bucket, root / label, env, layers)
                    warm["restore_seconds"] = float(restore.get("seconds") or 0.0)
                    warm["restored_files"] = int(restore.get("files") or 0)
                    scenarios["cold" if label == "default" else "cold_every"].append(cold)
                    scenarios[f"restored_{label}"].append(warm)
                    print(
                        f"run {run + 1}, threshold {cold['threshold']:g}: cold "
                        f"{cold['wall']:.2f} s wall, {cold['cpu']:.2f} s cpu ({cold['entries']} "
                        f"of {cold['requests']} compiles written); restored "
                        f"{warm['restored_files']} files in {warm['restore_seconds']:.2f} s, "
                        f"start {warm['wall']:.2f} s wall, {warm['cpu']:.2f} s cpu "
                        f"({warm['hits']} hits of {warm['requests']})",
                        flush=True,
                    )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return scenarios


def synthetic_sizes(entries: int, total_bytes: int, seed: int = 0) -> list[int]:
    """Mixed sizes, log-uniform from 4 KiB to 8 MiB (many small helpers, a few big forwards),
    scaled to `total_bytes`."""
    rng = random.Random(seed)
    raw = [2 ** rng.uniform(12, 23) for _ in range(entries)]
    scale = total_bytes / sum(raw)
    return [max(1, int(r * scale)) for r in raw]


def count_in_flight(api: FakeGcsApi) -> Callable[[], int]:
    """Wrap the fake's GET handler: the most object downloads (`alt=media`) served at once,
    from the request's arrival to the last byte written."""
    handler = api._handler  # the class the running server instantiates per request
    real_get = handler.do_GET
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def do_get(self: Any) -> None:
        if "alt=media" not in self.path:
            real_get(self)
            return
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            real_get(self)
        finally:
            with lock:
                state["now"] -= 1

    handler.do_GET = do_get  # type: ignore[method-assign]
    return lambda: state["most"]


def restore_speed(entries: int, mb: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="tpu-vllm-bench-restore-"))
    try:
        with loopback_bucket(root / "gcs") as (api, metadata):
            bucket = Bucket(api, metadata, f"gs://{BUCKET}/xla-cache/restore/", root / "gcs")
            cache = root / CONTAINER_CACHE
            bucket.restore(root / "node1", cache)  # cold: records the generation for the save
            cache.mkdir(parents=True, exist_ok=True)
            sizes = synthetic_sizes(entries, int(mb * 1e6))
            rng = random.Random(1)
            for index, size in enumerate(sizes):
                name = f"jit_step_{index:03d}-{rng.getrandbits(256):064x}-cache"
                (cache / name).write_bytes(os.urandom(size))
            time.sleep(1.2)  # older than the tool's settle pause
            began = time.monotonic()
            saved = bucket.save(root / "node1")
            save_wall = time.monotonic() - began
            if not saved.get("ok"):
                raise SystemExit(f"the save failed: {saved}")
            shutil.rmtree(root / "node1")
            shutil.rmtree(root / "root")
            most = count_in_flight(api)
            began = time.monotonic()
            result = bucket.restore(root / "node2", cache)
            wall = time.monotonic() - began
            fetched = json.loads((root / "node2" / "fetch.json").read_text())
            if not result.get("restored"):
                raise SystemExit(f"the restore failed: {result}")
            total = sum(sizes)
            return {
                "files": result["files"],
                "bytes": total,
                "smallest": min(sizes),
                "largest": max(sizes),
                "restore_seconds": float(result["seconds"]),
                "fetch_seconds": float(fetched["seconds"]),
                "wall": wall,
                "save_wall": save_wall,
                "in_flight": most(),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


ROWS = (
    ("cold", "cold start, JAX's default threshold (today)"),
    ("restored_default", "fresh node, restored, default threshold 1.0 s"),
    ("cold_every", "cold start, every compile cached (threshold 0)"),
    ("restored_every", "fresh node, restored, every compile cached"),
)


def report_starts(scenarios: dict[str, list[dict[str, Any]]], runs: int) -> None:
    """Medians per scenario, as seconds and as a ratio to today's cold start, for both the wall
    time and the process's CPU time."""

    def median(key: str, field: str) -> float:
        return float(statistics.median(float(s[field]) for s in scenarios[key]))

    first = scenarios["cold"][0]
    print(
        f"\ntime to first result, median of {runs} runs ({first['requests']} compiles per "
        f"start; of the cold start's {median('cold', 'wall'):.1f} s wall, XLA compiling took "
        f"{median('cold', 'compile_seconds'):.1f} s):"
    )
    for key, label in ROWS:
        sample = scenarios[key][-1]
        if key.startswith("restored"):
            extra = (
                f"restore {median(key, 'restore_seconds'):.2f} s, "
                f"{sample['hits']}/{sample['requests']} hits"
            )
        else:
            extra = f"{sample['entries']} of {sample['requests']} compiles written"
        print(
            f"- {label}: wall {median(key, 'wall'):.2f} s "
            f"({median(key, 'wall') / median('cold', 'wall'):.2f} x cold), "
            f"cpu {median(key, 'cpu'):.2f} s ({median(key, 'cpu') / median('cold', 'cpu'):.2f} "
            f"x cold); {extra}"
        )
    for field in ("wall", "cpu"):
        every, default = median("restored_every", field), median("restored_default", field)
        print(
            f"restored, every compile / restored, default threshold ({field}): "
            f"{every / default:.2f} ({default - every:.2f} s less)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--mb", type=float, default=SEED_CACHE_MB, help="cache size, 1e6 bytes")
    parser.add_argument("--skip-starts", action="store_true", help="only the restore speed")
    args = parser.parse_args()

    if not args.skip_starts:
        report_starts(start_times(args.runs, args.layers), args.runs)

    speed = restore_speed(args.entries, args.mb)
    mb = speed["bytes"] / 1e6
    print(
        f"\nrestore over the JSON API from a loopback fake: {speed['files']} entries "
        f"({speed['smallest'] / 1024:.0f} KiB to {speed['largest'] / 2**20:.1f} MiB), {mb:.0f} MB "
        f"in {speed['restore_seconds']:.2f} s (fetch {speed['fetch_seconds']:.2f} s) = "
        f"{mb / speed['restore_seconds']:.0f} MB/s; at most {speed['in_flight']} download(s) in "
        f"flight; the save took {speed['save_wall']:.1f} s ({mb / speed['save_wall']:.0f} MB/s)"
    )
    print(
        f"(os: {os.uname().sysname}, {os.cpu_count()} cpus; CPU only: the TPU figure, 857 s cold "
        "in seed 000, is confirmed only on a TPU)"
    )


if __name__ == "__main__":
    main()
