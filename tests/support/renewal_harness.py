"""A renewal inside the window, end to end on loopback: TPU API fake, two fake VMs over real
SSH, a Cloud DNS record and a client that keeps asking the name.

Used by tests/ssh/test_zero_gap_renewal.py (what must hold) and benchmarks/renewal_gap.py (the
client-visible gap, measured for both replacement orders). Every piece is the program's own:
the provider's props, the command texts of a mocked run of the v5e1 stack with `dns.*`, its
dependency graph (tests/support/engine_order.py runs the steps in the engine's order), and the
provider's read, diff, create and delete against the fake TPU API. Only time is scaled: the
record's TTL (60 s) and the drain (3 min) become fractions of a second, the run's end comes a
few seconds after ACTIVE, and the fake vLLM boots at 2000x.

A fake VM plays the node with a given external IP (the fake API hands out 203.0.113.N): the
remote commands for that node run on its SSH host, and a client connecting to that IP reaches
its vLLM port. When the fake API stops the node (its queued resource leaves ACTIVE: deleted or
ended), the harness kills that VM's containers, as Google deletes the VM with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import itertools
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi.dynamic as dyn

from components.vm.host_key import NodeHostKeyProvider
from components.vm.queued_resource import QueuedResourceProvider
from tests.support import engine_order
from tests.support.fakes.cloud_dns import CachingResolver, FakeManagedZone
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost, SshHostFactory
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.mock_outputs import MANAGED_ZONE, ZONE_DNS_NAME
from tests.support.pulumi_program import TEST_PROJECT, run_program
from tests.support.queued_resource_props import props_for
from tests.support.remote_stack import FETCH, IMAGE, READY, START, commands, on_host

STACK = "v5e1"
WITH_DNS = {"tpu-vllm:dns.managedZone": MANAGED_ZONE}
RECORD = f"{STACK}.{ZONE_DNS_NAME}"
RUN_SECONDS = 4 * 3600  # v5e1's maxRunDuration: the fake ends runs this long after ACTIVE
API_KEY = b"renewal-test-key"
#: Scaled stand-ins for the record's 60 s TTL and the 180 s drain (TTL + margin).
TTL = 0.5
DRAIN = 1.5
#: The window opens this long after the first node turned ACTIVE: after the first deployment.
WINDOW_AFTER = 6.0
#: v5e1's zone, and a second one for a renewal that finds no capacity beside its predecessor.
ZONE_A, ZONE_B = "us-west4-a", "us-west4-b"


@dataclass
class Answer:
    """One client request: when, to which address, and whether the server answered."""

    at: float
    address: str
    ok: bool
    error: str = ""


def ask(address: str, ports: Mapping[str, int]) -> Answer:
    """`GET /v1/models` on the fake VM that plays `address`, with the API key."""
    now = time.monotonic()
    port = ports.get(address)
    if port is None:
        return Answer(now, address, False, "no route")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request(
            "GET", "/v1/models", headers={"Authorization": f"Bearer {API_KEY.decode()}"}
        )
        status = connection.getresponse().status
    except OSError as error:
        return Answer(now, address, False, type(error).__name__)
    finally:
        connection.close()
    return Answer(now, address, status == 200, "" if status == 200 else str(status))


@dataclass
class Client:
    """A client that resolves the name (honouring the TTL) and asks `/v1/models` every
    `interval` seconds, as an OpenAI SDK would before each request."""

    resolver: CachingResolver
    ports: Mapping[str, int]
    interval: float = 0.02
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Client:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.answers.append(self._ask())
            time.sleep(self.interval)

    def _ask(self) -> Answer:
        now = time.monotonic()
        addresses = self.resolver.resolve(RECORD)
        if not addresses:
            return Answer(now, "", False, "NXDOMAIN")
        return ask(addresses[0], self.ports)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between two answered requests in [start, end] (a failed request
        in between counts as part of the gap)."""
        times = [a.at for a in self.answers if a.ok and start <= a.at <= end]
        return max((b - a for a, b in itertools.pairwise(times)), default=end - start)

    def failures(self, start: float, end: float) -> list[Answer]:
        return [a for a in self.answers if not a.ok and start <= a.at <= end]


@dataclass
class Node:
    """A fake VM standing in for one TPU node."""

    host: SshHost
    texts: dict[str, str] = field(default_factory=dict)
    container: str = ""
    ready_at: float = 0.0
    #: Whether each other node answered `/v1/models` (asked directly) when this one was ready.
    others_serving_at_ready: dict[str, bool] = field(default_factory=dict)


class Renewal:
    """The stack deployed once (the node being renewed), then renewed in the engine's order.
    `zones` replaces the stack's `tpu.zones` (v5e1 has one)."""

    def __init__(
        self,
        fake: FakeTpuApi,
        hosts: list[SshHost],
        api_key_version: str,
        zone: FakeManagedZone,
        zones: list[str] | None = None,
    ) -> None:
        self.fake = fake
        self.hosts = hosts
        self.version = api_key_version
        self.zone = zone
        self.provider = QueuedResourceProvider()
        self.props = self._props(zones)
        #: IP -> fake VM, bound as the fake API hands out node IPs.
        self.nodes: dict[str, Node] = {}
        self.ports: dict[str, int] = {}
        with _own_event_loop():
            self.program = run_program(STACK, WITH_DNS)
        # The fetch and start texts do not depend on the node; the readiness text names the
        # container the start printed, so it is taken from the program once that is known.
        self._spare = [Node(host, self._texts(host)) for host in hosts]
        self.current: dict[str, Any] = {}  # the QR's outputs in the state
        self.record_changed_at = 0.0
        self.stopped: dict[str, float] = {}  # QR name -> when its VM stopped serving

    @staticmethod
    def _props(zones: list[str] | None) -> dict[str, Any]:
        """The stack's props as the engine hands them over, with the window and drain scaled."""
        lead = RUN_SECONDS - WINDOW_AFTER
        props = {**props_for(STACK), "renewal_lead_seconds": lead, "drain_seconds": DRAIN}
        return {**props, "zones": list(zones)} if zones else props

    # -- what each step does -------------------------------------------------------------

    def _texts(self, host: SshHost, container: str | None = None) -> dict[str, str]:
        """The program's command texts for the fake VM `host` (its own vLLM port). A step runs
        in a worker thread, and the mocked program needs an event loop there: it gets its own."""
        changes = {**WITH_DNS, **on_host(host)}
        with _own_event_loop():
            if container is None:
                texts = commands(STACK, changes, api_key_version=self.version)
                return {FETCH: texts[FETCH], START: texts[START]}
            # The readiness text names the container the start printed.
            return {READY: commands(STACK, changes, start_stdout=container)[READY]}

    def _node(self, ip: str) -> Node:
        if ip not in self.nodes:
            self.nodes[ip] = self._spare.pop(0)
            self.ports[ip] = self.nodes[ip].host.vllm_port
        return self.nodes[ip]

    def _run(self, node: Node, name: str) -> str:
        done = node.host.run(node.texts[name], timeout=120)
        assert done.returncode == 0, f"{name}: {done.stderr.decode()[-2000:]}"
        return done.stdout.decode()

    def _watch_vm(self, qr_name: str, ip: str) -> None:
        """Stop the fake VM once the API no longer has its node ACTIVE (deleted or ended)."""

        def watch() -> None:
            while self.fake.state(qr_name) == "ACTIVE":
                time.sleep(0.01)
            self.stopped[qr_name] = time.monotonic()
            self.nodes[ip].host.docker.kill_all()

        threading.Thread(target=watch, daemon=True).start()

    def step(self, name: str) -> None:
        """The create or update of one resource, against the node the state now names."""
        if name == "tpu-qr":
            created = self.provider.create(self.props)
            self.current = {**dict(created.outs or {}), "__id": created.id}
            self._watch_vm(created.id or "", self.current["external_ip"])
            return
        ip = str(self.current["external_ip"])
        node = self._node(ip)
        if name == "node-host-key":
            NodeHostKeyProvider().create(
                {
                    "node_name": self.current["node_name"],
                    "node_create_time": self.current["create_time"],
                    "allow_unverified": False,
                    "timeout_seconds": 10.0,
                    "poll_seconds": 0.05,
                }
            )
        elif name == "secrets-fetch":
            self._run(node, FETCH)
        elif name == "vllm-start":
            node.container = self._run(node, START).strip()
            node.texts.update(self._texts(node.host, node.container))
        elif name == "vllm-ready":
            self._run(node, READY)
            node.ready_at = time.monotonic()
            for other in self.nodes:
                if other != ip:
                    node.others_serving_at_ready[other] = ask(other, self.ports).ok
        elif name == "vllm-metrics-agent":
            # The Ops Agent's setup after readiness changes nothing a client sees; its script
            # runs against stand-ins in tests/loopback/test_metrics_agent.py (here it would download
            # Google's installer).
            pass
        elif name == "endpoint-name-a":
            self.zone.upsert(RECORD, [ip], TTL)
            self.record_changed_at = time.monotonic()
        else:
            raise AssertionError(f"no step modelled for {name}: the program changed")

    # -- the two deployments ------------------------------------------------------------

    def deploy(self) -> bool:
        """The first `pulumi up`: every resource created, in dependency order. Returns whether
        a refresh and diff right after the TPU turned ACTIVE reported a change (they must not:
        its window opens only WINDOW_AFTER seconds later)."""
        for host in self.hosts:
            host.docker.set_scenario("v5e1_ready.log", speed=2000)
        order = engine_order.dependants(self.program.dependencies, "tpu-qr")
        changed_at_start = True
        for name in order:
            self.step(name)
            if name == "tpu-qr":
                self.refresh()
                diff = self.provider.diff(str(self.current["__id"]), self.current, self.props)
                changed_at_start = bool(diff.changes)
        return changed_at_start

    def reconfigure(self, **changes: Any) -> dyn.DiffResult:
        """A `pulumi up` after the stack's config changed (`changes`: props, e.g. `zones`,
        `drain_seconds`), before the renewal: the engine's steps for the queued resource as
        pulumi/pulumi `pkg/resource/deploy/step_generator.go` picks them: an update when the
        diff reports changes without replacing (the state then holds what `update` returned),
        a SameStep otherwise (`pkg/resource/deploy/step.go`: the old outputs are kept). No
        dependant changes: the queued resource's outputs stay what they were. Inside the
        window too, the diff must store such a change rather than renew with the old values."""
        self.props = {**self.props, **changes}
        name = str(self.current["__id"])
        diff = self.provider.diff(name, self.current, self.props)
        assert not diff.replaces, diff.replaces
        if diff.changes:
            updated = self.provider.update(name, self.current, self.props)
            self.current = {**dict(updated.outs or {}), "__id": name}
        return diff

    def wait_for_window(self, timeout: float = WINDOW_AFTER + 30) -> None:
        """Refresh until the diff asks for a replacement (the window opened)."""
        deadline = time.monotonic() + timeout
        while True:
            self.refresh()
            if self.provider.diff(str(self.current["__id"]), self.current, self.props).changes:
                return
            if time.monotonic() > deadline:
                raise AssertionError("the renewal window never opened")
            time.sleep(0.2)

    def refresh(self) -> dyn.ReadResult:
        """`pulumi refresh`: the provider's read of the queued resource in the state."""
        read = self.provider.read(str(self.current["__id"]), self.current)
        self.current = {**dict(read.outs or {}), "__id": read.id}
        return read

    def renew(self, *, delete_before_replace: bool) -> list[engine_order.Step]:
        """`pulumi up` after the refresh: replace the queued resource in the engine's order."""
        old = dict(self.current)

        def delete(name: str) -> None:
            if name == "tpu-qr":
                self.provider.delete(str(old["__id"]), old)
            elif name == "node-host-key":
                NodeHostKeyProvider().delete(f"{old['node_name']}/hostkey", {})

        return engine_order.replace(
            self.program.dependencies,
            "tpu-qr",
            replaced={"tpu-qr", "node-host-key"},
            step=self.step,
            delete=delete,
            delete_before_replace=delete_before_replace,
        )


@contextlib.contextmanager
def _own_event_loop() -> Iterator[None]:
    """A fresh event loop for a mocked program run, in whichever thread it runs; the thread's
    previous loop (the main thread's, which later tests use) is put back afterwards."""
    try:
        previous: asyncio.AbstractEventLoop | None = (
            asyncio.get_event_loop_policy().get_event_loop()
        )
    except RuntimeError:  # a worker thread has none
        previous = None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(previous)
        loop.close()


def setup_secrets(secret_manager: FakeSecretManager, metadata: FakeMetadataServer) -> str:
    """The HF token and the stack's API key in Secret Manager; the API key version's name."""
    secret_manager.add_version(TEST_PROJECT, "hf-token", b"hf_renewal")
    version = secret_manager.add_version(TEST_PROJECT, f"tpu-vllm-{STACK}-api-key", API_KEY)
    metadata.access_token = secret_manager.token
    return str(version)


def start_vms(
    factory: SshHostFactory, secret_manager: FakeSecretManager, metadata: FakeMetadataServer
) -> list[SshHost]:
    """Two fake VMs: the node being renewed and its successor."""
    env = {"GCE_METADATA_HOST": metadata.host, "SECRET_MANAGER_API_ENDPOINT": secret_manager.url}
    return [factory(env=env, images_present=[IMAGE]) for _ in range(2)]
