"""Benchmark: time to ready of a fresh node without and with the compile cache (run by hand).

    python -m benchmarks.compile_cache [--speed 100] [--entry-mib 1] [--runs 3]

Over real SSH against the test sshd, fake docker and a fake bucket (a local directory behind
the fake `gcloud storage`), replaying the reconstructed v5e-1 log paced like seed 000: 857 s to
ready cold, 685 s of it XLA compilation, 497 s with the cache; `--speed 100` scales that to
8.57 s and 4.97 s. The fake container skips its compile phase only when the restored cache
holds every entry its cold boot writes (tests/support/fakes/fake_docker.py, Boot). Each run:
- off:  cache.enabled false on a fresh node (what every node paid before);
- cold: cache on, empty bucket: a fresh node compiles, then saves in the background;
- warm: the next fresh node (empty home) restores before `docker run`.
Time to ready = from sending the start command to the readiness command's result line.
Restore overhead = the restore's own seconds (the readiness result's `cache.seconds`) and the
start command's extra wall time over `off`. Not a test: timings depend on the machine, and the
saving on a real TPU is confirmed only there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.compile_cache_lab import COLD, WARM, Lab
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.loopback import free_port
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost
from tests.support.remote_stack import READY, START, commands


def timed_start(lab: Lab, node: SshHost, scenario: dict[str, Any], enabled: bool) -> dict[str, Any]:
    node.docker.set_scenarios([scenario])  # type: ignore[list-item]
    changes = {"tpu-vllm:vllm.port": free_port(), "tpu-vllm:cache.enabled": enabled}
    began = time.monotonic()
    started = node.run(commands("v5e1", changes)[START], timeout=300)
    start_seconds = time.monotonic() - began
    if started.returncode:
        raise SystemExit(started.stderr.decode())
    container = started.stdout.decode().split()[-1]
    ready = node.run(commands("v5e1", changes, start_stdout=container)[READY], timeout=300)
    total = time.monotonic() - began
    lab.open_up()
    from components.vm.vllm import parse_ready

    result = parse_ready(ready.stdout.decode())
    if ready.returncode or result["startup_seconds"] is None:
        raise SystemExit(ready.stdout.decode())
    return {"ready": total, "start_cmd": start_seconds, "cache": result["cache"], "node": node}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--entry-mib", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    scenario = {
        "log": COLD,
        "warm_log": WARM,
        "speed": args.speed,
        "xla_entry_bytes": int(args.entry_mib * 1024 * 1024),
    }
    hosts: list[SshHost] = []

    def factory(**kwargs: Any) -> SshHost:
        hosts.append(SshHost.start(**kwargs))
        return hosts[-1]

    samples: dict[str, list[float]] = {"off": [], "cold": [], "warm": [], "restore": [],
                                       "start_extra": []}  # fmt: skip
    secrets = FakeSecretManager()
    secrets.start()
    metadata = FakeMetadataServer(secrets.token).start()
    try:
        for run in range(args.runs):
            root = Path(tempfile.mkdtemp(prefix="tpu-vllm-gcs-bench-"))
            api = FakeGcsApi(root).start()
            try:
                lab = Lab(factory, secrets, metadata, root, api)
                off = timed_start(lab, lab.node(), scenario, enabled=False)
                off["node"].docker.kill_all()
                cold = timed_start(lab, lab.node(), scenario, enabled=True)
                deadline = time.monotonic() + 300
                work = cold["node"].home / ".tpu-vllm" / "xla-cache" / "save.json"
                while not work.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                cold["node"].docker.kill_all()
                lab.open_up()
                warm = timed_start(lab, lab.node(), scenario, enabled=True)
                warm["node"].docker.kill_all()
                if not warm["cache"]["restored"]:
                    raise SystemExit(f"the warm node did not restore: {warm['cache']}")
                samples["off"].append(off["ready"])
                samples["cold"].append(cold["ready"])
                samples["warm"].append(warm["ready"])
                samples["restore"].append(float(warm["cache"]["seconds"]))
                samples["start_extra"].append(warm["start_cmd"] - off["start_cmd"])
                print(
                    f"run {run + 1}: off {off['ready']:.2f} s, cold {cold['ready']:.2f} s, "
                    f"warm {warm['ready']:.2f} s; restored {warm['cache']['files']} files, "
                    f"{warm['cache']['bytes'] / 2**20:.0f} MiB in {warm['cache']['seconds']} s"
                )
            finally:
                api.stop()
                for host in hosts:
                    host.stop()
                hosts.clear()
                shutil.rmtree(root, ignore_errors=True)
    finally:
        metadata.stop()
        secrets.stop()
    scale = args.speed
    print(
        f"\nmedians over {args.runs} runs; the replayed log takes {857 / scale:.2f} s cold, "
        f"{497 / scale:.2f} s warm (seed 000 / {scale:g}); the rest is SSH and node overhead:"
    )
    for name, label in (
        ("off", "fresh node, cache off"),
        ("cold", "fresh node, cache on, empty bucket (compiles, then saves)"),
        ("warm", "fresh node, cache restored"),
        ("restore", "restore (fetch alongside the pull + verify + install)"),
        ("start_extra", "start command's extra wall time over cache off"),
    ):
        value = statistics.median(samples[name])
        print(f"- {label}: {value:.2f} s")
    print(f"(os: {os.uname().sysname}; the saving on a real TPU is confirmed only there)")


if __name__ == "__main__":
    main()
