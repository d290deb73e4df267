"""`scripts/renew.py` renews `v5e1` inside its window through the real Pulumi CLI.

The stack has a stable DNS name (`dns.managedZone`, a zone made "by hand" in the stand-in gcp
provider's cloud) and a 60 s drain (`renewal.drain`, the record's TTL). After the first `up`,
renew.py finds nothing to do; then the fake TPU API moves the run near its end (as if hours
had passed: `end_run_in`), and renew.py's own `pulumi up --refresh --yes` replaces the node. The
engine's event log (`--event-log`, added to that command by a wrapper first on PATH: renew.py's
command line is otherwise its own) shows create-before-delete: the successor created, the server
started on it, the DNS record moved only once it was ready, and the old node deleted a drain
later. Meanwhile a client resolves the name (keeping each answer for its TTL, RFC 1035) and asks
`/v1/models` every 50 ms; its failures and longest gap are printed (`-s`) and asserted only to
be failure-free, never on time.
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.vm.queued_resource_spec import RENEWAL_SUFFIX
from tests.support.engine_stack import PROJECT, EngineStack, Fakes, Lifecycle, engine_stack, events
from tests.support.fakes.cloud_dns import CachingResolver, RecordSet
from tests.support.standins.gcp_dns import RECORDS, seed_zone
from tests.support.standins.store import Store

pytestmark = pytest.mark.engine

STACK = "v5e1"
ZONE, ZONE_DNS = "models", "models.example.com."
RECORD = f"{STACK}.{ZONE_DNS}"
DRAIN = 60


class StandinZone:
    """The stand-in provider's Cloud DNS zone, read as a resolver reads it."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def lookup(self, name: str) -> RecordSet | None:
        fqdn = name if name.endswith(".") else f"{name}."
        for record in Store(RECORDS, self.state).all().values():
            if record.get("name") == fqdn and record.get("type") == "A":
                return RecordSet(fqdn, "A", float(record["ttl"]), tuple(record["rrdatas"]))
        return None


@dataclass
class Client:
    """Resolves the name (honouring the TTL) and asks `/v1/models` with the key, every 50 ms."""

    resolver: CachingResolver
    port: int
    key: str
    answers: list[tuple[float, str, bool]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Client:
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            addresses = self.resolver.resolve(RECORD)
            ok = False
            if addresses:
                connection = http.client.HTTPConnection(addresses[0], self.port, timeout=2)
                try:
                    headers = {"Authorization": f"Bearer {self.key}"}
                    connection.request("GET", "/v1/models", headers=headers)
                    ok = connection.getresponse().status == 200
                except OSError:
                    ok = False
                finally:
                    connection.close()
            self.answers.append((now, addresses[0] if addresses else "", ok))
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        time.sleep(0.2)

    def failures(self) -> list[tuple[float, str, bool]]:
        return [a for a in self.answers if not a[2]]

    def longest_gap(self) -> float:
        times = [at for at, _, ok in self.answers if ok]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    with engine_stack(tmp_path_factory.mktemp("engine-renewal"), STACK) as engine:
        seed_zone(engine.fakes.standin_state, PROJECT, ZONE, ZONE_DNS)
        engine.config_set("tpu-vllm:dns.managedZone", ZONE, "--path")
        engine.config_set("tpu-vllm:renewal.drain", f"{DRAIN}s", "--path")
        yield Lifecycle(engine)


def wrap_pulumi(engine: EngineStack[Fakes], log: Path) -> dict[str, str]:
    """PATH with a `pulumi` first that adds `--event-log LOG` to `pulumi up`, else the real CLI."""
    wrapper = engine.work / "wrapper-bin"
    wrapper.mkdir(exist_ok=True)
    script = wrapper / "pulumi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = up ]; then exec {engine.pulumi_path} "$@" --event-log {log}; fi\n'
        f'exec {engine.pulumi_path} "$@"\n'
    )
    script.chmod(0o755)
    return {"PATH": f"{wrapper}:{engine.env['PATH']}"}


def test_first_up_names_the_node(life: Lifecycle) -> None:
    with life.step("up"):
        engine = life.engine
        engine.up().check()
        [(_, address, _)] = engine.fakes.fleet.history
        record = StandinZone(engine.fakes.standin_state).lookup(RECORD)
        assert record is not None and record.rrdatas == (address,)
        outputs = engine.outputs(show_secrets=True)
        assert outputs["endpoint"] == f"http://{RECORD.rstrip('.')}:8000"
        assert outputs["endpoint_ip"] == f"http://{address}:8000"
        life.memo.update(first=address, key=outputs["api_key"], outputs=outputs)


def test_renew_does_nothing_outside_the_window(life: Lifecycle) -> None:
    with life.step("too-early", after="up"):
        engine = life.engine
        run = engine.python("-m", "scripts.renew", STACK).check()
        assert "nothing to do" in run.stdout, run.output
        assert len(engine.fakes.tpu.requests_for("queuedResources.create")) == 1


def test_renew_inside_the_window_replaces_the_node_create_before_delete(life: Lifecycle) -> None:
    with life.step("renew", after="too-early"):
        engine = life.engine
        fakes = engine.fakes
        outputs = life.memo["outputs"]
        lead = float(outputs["renewal_lead_seconds"])
        fakes.tpu.end_run_in(outputs["queued_resource"], lead - 600)  # 10 min inside
        client = Client(CachingResolver(StandinZone(fakes.standin_state)), 8000, life.memo["key"])
        log = engine.work / "renew.events.jsonl"
        # The tag moves before the renewal: the successor must still run the pinned digest.
        newer = fakes.registry.push("vllm/vllm-tpu", "nightly", "the next day's nightly")
        client.start()
        time.sleep(1)
        started = time.monotonic()
        try:
            run = engine.python("-m", "scripts.renew", STACK, env=wrap_pulumi(engine, log)).check()
            took = time.monotonic() - started
            time.sleep(2)
        finally:
            client.stop()
        assert "inside the renewal window" in run.stdout, run.output
        first = life.memo["first"]
        [(_, a, vm_a), (_, b, vm_b)] = fakes.fleet.history
        assert a == first and b != first
        assert fakes.fleet.running == [b], "the old node was not deleted"
        record = StandinZone(fakes.standin_state).lookup(RECORD)
        assert record is not None and record.rrdatas == (b,)
        # Beside its predecessor, under the other id pair; the old request is gone.
        old_qr, new_qr = outputs["queued_resource"], engine.outputs()["queued_resource"]
        assert new_qr == old_qr + RENEWAL_SUFFIX
        assert fakes.tpu.state(old_qr) is None and fakes.tpu.state(new_qr) == "ACTIVE"
        # The server moved: started on the successor (the old VM is gone, with its records).
        runs = [i for i in vm_b.docker.invocations() if i["argv"][1:2] == ["run"]]
        assert len(runs) == 1
        pinned = outputs["image"]
        assert engine.outputs()["image"] == pinned and newer not in pinned
        assert pinned in runs[0]["argv"], runs[0]["argv"]
        assert not vm_a.workdir.exists()
        order = step_order(events(log))
        assert_create_before_delete(order)
        failed, gap = client.failures(), client.longest_gap()
        print(
            f"\nrenewal through the real engine: {len(client.answers)} requests, "
            f"{len(failed)} failed, longest gap between answers {gap:.2f} s, "
            f"renew.py took {took:.0f} s (drain {DRAIN} s, TTL 60 s)"
        )
        life.memo["gap"] = (len(client.answers), len(failed), gap, took)
        assert not failed, f"the client saw failures during the renewal: {failed[:5]}"
        (engine.work / "renewal-gap.json").write_text(
            json.dumps({"requests": len(client.answers), "failed": len(failed), "gap": gap})
        )


def step_order(log: list[dict[str, Any]]) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(kind, op, resource) -> (sequence, unix seconds) of the up's step events."""
    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    for event in log:
        for kind, key in (("pre", "resourcePreEvent"), ("done", "resOutputsEvent")):
            if key in event:
                meta = event[key]["metadata"]
                name = str(meta["urn"]).rsplit("::", 1)[-1]
                when = (int(event["sequence"]), int(event["timestamp"]))
                found.setdefault((kind, str(meta["op"]), name), when)
    return found


def assert_create_before_delete(order: dict[tuple[str, str, str], tuple[int, int]]) -> None:
    def seq(kind: str, op: str, name: str) -> int:
        assert (kind, op, name) in order, f"no {kind} {op} of {name}: {sorted(order)}"
        return order[(kind, op, name)][0]

    created = seq("done", "create-replacement", "tpu-qr")
    started = seq("done", "update", "vllm-start")
    ready = seq("done", "update", "vllm-ready")
    moved_pre = seq("pre", "update", "endpoint-name-a")
    moved = seq("done", "update", "endpoint-name-a")
    deleted_pre = seq("pre", "delete-replaced", "tpu-qr")
    deleted = seq("done", "delete-replaced", "tpu-qr")
    assert created < started < ready < moved_pre < moved < deleted_pre < deleted
    assert not any(op == "delete-replaced" and order[k][0] < created for k in order
                   for _, op, _ in [k])  # fmt: skip
    drained = (
        order[("done", "delete-replaced", "tpu-qr")][1]
        - order[("done", "update", "endpoint-name-a")][1]
    )
    assert drained >= DRAIN - 1, f"the old node went {drained} s after the record moved"


def test_a_successor_that_cannot_answer_does_not_take_the_name(life: Lifecycle) -> None:
    """The next renewal lands on a build that starts but answers with empty
    content. Its readiness check fails, so `pulumi up` fails: the record stays on the node that
    serves, that node is not deleted, no client request fails, and renew.py exits non-zero with
    the reason. The engine holds the old node for deletion; it deletes such resources only after
    every other step of a later `up` succeeded (pulumi's `performPostSteps`), so only once a
    successor has answered and the name has moved (docs/renewal.md, "A successor that cannot
    answer")."""
    with life.step("bad-successor", after="renew"):
        engine = life.engine
        fakes = engine.fakes
        serving = fakes.fleet.running[0]
        outputs = engine.outputs(show_secrets=True)
        fakes.tpu.end_run_in(
            outputs["queued_resource"], float(outputs["renewal_lead_seconds"]) - 600
        )
        good = fakes.fleet.scenario
        fakes.fleet.scenario = {**good, "answers": "empty_content"}
        client = Client(CachingResolver(StandinZone(fakes.standin_state)), 8000, outputs["api_key"])
        client.start()
        try:
            run = engine.python("-m", "scripts.renew", STACK)
        finally:
            client.stop()
            fakes.fleet.scenario = good
        assert run.returncode != 0, run.output
        assert "HTTP 200 with empty content" in run.output, run.output[-4000:]
        record = StandinZone(fakes.standin_state).lookup(RECORD)
        assert record is not None and record.rrdatas == (serving,)
        assert serving in fakes.fleet.running
        assert fakes.tpu.state(outputs["queued_resource"]) == "ACTIVE"
        assert not client.failures(), client.failures()[:5]
        assert outputs["api_key"] not in run.output
        pending = [r["urn"].rsplit("::", 1)[-1] for r in engine.resources() if r.get("delete")]
        assert "tpu-qr" in pending  # the serving node, deleted by no step of a failed up


def test_destroy_after_the_renewal(life: Lifecycle) -> None:
    with life.step("destroy", after="renew"):
        engine = life.engine
        engine.pulumi("destroy", "--yes").check()
        engine.fakes.fleet.wait_settled()
        assert engine.fakes.fleet.running == []
        assert Store(RECORDS, engine.fakes.standin_state).all() == {}
