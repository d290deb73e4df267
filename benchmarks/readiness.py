"""Benchmark: how fast the readiness check notices success and failure (run by hand).

    python -m benchmarks.readiness [--runs 10]

Over real SSH against the test sshd and fake docker, replaying the reconstructed v5e-1 log:
- detection latency: wall time from the container writing `Application startup complete.` to
  the readiness command printing `ready`;
- fail-fast latency: wall time from a crashing container exiting (the KV-cache dtype crash of
  seed 000) to the readiness command exiting non-zero.
Prints each run and the medians. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator

from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost
from tests.support.remote_stack import (
    FETCH,
    Readiness,
    commands,
    container_log,
    node_with_secrets,
    rfc3339,
    run_crash,
    start,
)


@contextlib.contextmanager
def node() -> Iterator[SshHost]:
    secrets = FakeSecretManager()
    secrets.start()
    metadata = FakeMetadataServer(secrets.token).start()
    try:
        host, version = node_with_secrets(
            SshHost.start, secrets, metadata, hf_token=b"hf_bench", api_key=b"bench-key"
        )
        try:
            done = host.run(commands("v5e1", api_key_version=version)[FETCH])
            if done.returncode:
                raise SystemExit(done.stderr.decode())
            yield host
        finally:
            host.stop()
    finally:
        metadata.stop()
        secrets.stop()


def detection(host: SshHost) -> float:
    host.docker.set_scenario("v5e1_ready.log", speed=400)
    container_id = start(host)
    readiness = Readiness(host, container_id, None)
    if readiness.wait() != 0:
        raise SystemExit(readiness.stdout)
    line = next(r for r in container_log(host, container_id) if "startup complete" in r["log"])
    return readiness.when("ready: Application startup complete.") - rfc3339(line["time"])


def fail_fast(host: SshHost) -> float:
    code, after_exit, _, _ = run_crash(host, "crash_kv_dtype.log")
    if code == 0:
        raise SystemExit("the crash was not detected")
    return after_exit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with node() as host:
        for name, measure in (("detection", detection), ("fail-fast", fail_fast)):
            samples = []
            for index in range(runs):
                samples.append(measure(host))
                print(f"{name} run {index + 1}: {samples[-1]:.3f} s", file=sys.stderr)
            print(
                f"{name}: median {statistics.median(samples):.3f} s, "
                f"max {max(samples):.3f} s over {runs} runs"
            )


if __name__ == "__main__":
    main()
