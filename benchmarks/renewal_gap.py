"""Benchmark: the gap a client sees while a stack is renewed (run by hand).

    python -m benchmarks.renewal_gap [--runs 3]

Runs tests/support/renewal_harness.py's renewal on loopback (TPU API fake, two fake VMs over real
SSH, a fake DNS zone, a client resolving the name and asking `/v1/models` every 20 ms), once per run
in each replacement order:
- create-first: the renewal window (the provider's diff says deleteBeforeReplace: false);
- delete-first: what a renewal after the run ended does (the old node is gone first).
For each it prints the failed requests and the longest time between two answered requests from
the start of the replacement until the client's cached answer expired after it. TTL (0.5 s),
drain (1.5 s) and the vLLM boot (857 s at 2000x) are scaled down, so the delete-first figure is
a scaled start, not a real one. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Iterator

from tests.support.fakes.cloud_dns import CachingResolver, FakeManagedZone
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.renewal_harness import TTL, Client, Renewal, setup_secrets, start_vms


@contextlib.contextmanager
def renewal() -> Iterator[Renewal]:
    tpu = FakeTpuApi().start()
    secrets = FakeSecretManager()
    secrets.start()
    metadata = FakeMetadataServer(secrets.token).start()
    os.environ["TPU_API_ENDPOINT"] = tpu.base_url
    os.environ["GOOGLE_OAUTH_ACCESS_TOKEN"] = tpu.token
    hosts: list[SshHost] = []
    try:
        version = setup_secrets(secrets, metadata)
        hosts = start_vms(SshHost.start, secrets, metadata)
        yield Renewal(tpu, hosts, version, FakeManagedZone())
    finally:
        for host in hosts:
            host.stop()
        metadata.stop()
        secrets.stop()
        tpu.stop()


def measure(delete_before_replace: bool) -> tuple[int, float, float]:
    """(failed requests, longest gap between answers, seconds the replacement took)."""
    with renewal() as run:
        run.deploy()
        client = Client(CachingResolver(run.zone), run.ports).start()
        try:
            run.wait_for_window()
            started = time.monotonic()
            run.renew(delete_before_replace=delete_before_replace)
            took = time.monotonic() - started
            time.sleep(TTL + 0.5)
            ended = time.monotonic()
        finally:
            client.stop()
        return len(client.failures(started, ended)), client.longest_gap(started, ended), took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    for name, dbr in (("create-first (renewal window)", False), ("delete-first", True)):
        samples = [measure(dbr) for _ in range(runs)]
        for index, (failed, gap, took) in enumerate(samples, 1):
            print(f"{name} run {index}: {failed} failed requests, longest gap {gap:.3f} s, "
                  f"replacement took {took:.1f} s")  # fmt: skip
        gaps = [gap for _, gap, _ in samples]
        print(
            f"{name}: longest gap median {statistics.median(gaps):.3f} s, max {max(gaps):.3f} s; "
            f"failed requests {sum(f for f, _, _ in samples)} over {runs} runs"
        )


if __name__ == "__main__":
    main()
