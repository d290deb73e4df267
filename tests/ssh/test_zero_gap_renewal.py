"""A stack inside its renewal window is renewed with no gap, over real SSH.

The whole renewal runs on loopback (tests/support/renewal_harness.py): the provider against the TPU
API fake, the program's own remote commands on two fake VMs over real SSH, the DNS record in a fake
zone, and a client that resolves the name (honouring the TTL) and asks `/v1/models` every 20 ms
throughout. The steps run in the order `pulumi up` would run them (tests/support/engine_order.py,
from pulumi's step generator), on the program's own dependency graph. TTL and drain are scaled
to 0.5 s and 1.5 s. The client-visible gap is measured by benchmarks/renewal_gap.py.

The successor beside its predecessor (the other id pair) runs through the real engine instead
(tests/engine/test_engine_renewal.py). What stays here is what no engine test runs: no capacity left
in the old node's zone, so that the successor lands in the stack's next zone under the stack's own
ids, and a drain or zone changed since the create; the old node must drain in each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from components import renewal as renewal_window
from components.vm.queued_resource import QueuedResourceProvider
from components.vm.queued_resource_spec import RENEWAL_SUFFIX
from scripts import renew
from tests.support.engine_order import Step
from tests.support.fakes.cloud_dns import CachingResolver, FakeManagedZone
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHostFactory
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.renewal_harness import (
    DRAIN,
    RECORD,
    TTL,
    ZONE_A,
    ZONE_B,
    Client,
    Renewal,
    setup_secrets,
    start_vms,
)


@pytest.fixture
def new_renewal(
    fake_tpu: FakeTpuApi,
    monkeypatch: pytest.MonkeyPatch,
    ssh_host_factory: SshHostFactory,
    fake_secret_manager: FakeSecretManager,
    fake_metadata: FakeMetadataServer,
) -> Iterator[Callable[[list[str] | None], Renewal]]:
    """A renewal of the stack in `zones` (None: its own, one zone)."""
    monkeypatch.setenv("TPU_API_ENDPOINT", fake_tpu.base_url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", fake_tpu.token)
    version = setup_secrets(fake_secret_manager, fake_metadata)
    hosts = start_vms(ssh_host_factory, fake_secret_manager, fake_metadata)
    yield lambda zones: Renewal(fake_tpu, hosts, version, FakeManagedZone(), zones)


@dataclass
class Renewed:
    """What a renewal did, as the client and the fakes saw it."""

    old_name: str
    old_ip: str
    new_name: str
    new_ip: str
    steps: list[Step]
    client: Client
    started: float
    ended: float


def renew_while_asking(renewal: Renewal, *, next_zone: bool) -> Renewed:
    """Wait for the window and renew (with `next_zone`, zone A has no capacity left for the
    successor), while a client asks the name throughout."""
    old_name, old_ip = str(renewal.current["__id"]), str(renewal.current["external_ip"])
    assert renewal.zone.lookup(RECORD).rrdatas == (old_ip,)  # type: ignore[union-attr]
    client = Client(CachingResolver(renewal.zone), renewal.ports).start()
    try:
        renewal.wait_for_window()
        # The scheduled check sees it too: ACTIVE with less than the lead left.
        queued = renew.queued_resource_state(old_name)
        assert queued is not None and queued.state == "ACTIVE"
        left = renewal_window.seconds_left(queued.termination_time)
        decision = renew.decide(queued.state, left, renewal.props["renewal_lead_seconds"])
        assert decision.renew, decision.reason
        # The refresh found it inside the window: a replacement, creating first.
        diff = QueuedResourceProvider().diff(old_name, renewal.current, renewal.props)
        assert diff.replaces == ["termination_time"] and diff.delete_before_replace is False
        if next_zone:  # no capacity left beside the old node: the next zone has some
            renewal.fake.set_zone(ZONE_A, "fail", f"There is no more capacity in {ZONE_A}")
        started = time.monotonic()
        steps = renewal.renew(delete_before_replace=False)
        time.sleep(TTL + 0.5)  # past the last cached answer
        ended = time.monotonic()
    finally:
        client.stop()
    new_name, new_ip = str(renewal.current["__id"]), str(renewal.current["external_ip"])
    if next_zone:  # the stack's own ids, in the next zone
        assert new_name == old_name.replace(f"/{ZONE_A}/", f"/{ZONE_B}/")
    else:  # its own ids, beside
        assert new_name == old_name + RENEWAL_SUFFIX
    assert new_ip != old_ip
    return Renewed(old_name, old_ip, new_name, new_ip, steps, client, started, ended)


def assert_drained_with_no_gap(renewal: Renewal, done: Renewed) -> None:
    """The old node serves until the new one does and through the drain after the record
    moved; not one request fails."""
    client, started = done.client, done.started
    old_ip, new_ip = done.old_ip, done.new_ip
    # The old queued resource is deleted only after the drain, and only then.
    [(changed_at, _, rrdatas)] = [c for c in renewal.zone.changes if c[0] >= started]
    assert rrdatas == (new_ip,)
    assert renewal.stopped[done.old_name] - changed_at >= DRAIN
    when = {(s.kind, s.name): s for s in done.steps}
    assert when[("delete", "tpu-qr")].started >= max(
        s.ended for s in done.steps if s.kind != "delete"
    )
    assert renewal.fake.state(done.old_name) is None
    assert renewal.fake.state(done.new_name) == "ACTIVE"
    # Both nodes answered throughout: not one request failed, and the client moved over.
    assert client.failures(started, done.ended) == []
    assert [a for a in client.answers if a.address == old_ip and a.at > started]
    assert all(a.ok for a in client.answers if a.address == old_ip)
    assert {a.address for a in client.answers if a.at > started} == {old_ip, new_ip}
    assert client.answers[-1].address == new_ip and client.answers[-1].ok


def test_a_stack_renewed_into_its_next_zone_has_no_moment_without_a_server(
    new_renewal: Callable[[list[str] | None], Renewal],
) -> None:
    """The successor beside its predecessor runs through the real engine
    (tests/engine/test_engine_renewal.py); this is the case it does not run: no capacity left in the
    old node's zone, so the successor lands in the stack's next zone under its own ids."""
    renewal = new_renewal([ZONE_A, ZONE_B])
    # Outside the window (the first node just turned ACTIVE) a refresh changes nothing.
    assert renewal.deploy() is False
    done = renew_while_asking(renewal, next_zone=True)
    old_ip, new_ip = done.old_ip, done.new_ip
    when = {(s.kind, s.name): s for s in done.steps}
    ready = renewal.nodes[new_ip].ready_at
    # The new node became ready while the old one still served (asked directly then), and
    # every request the client sent the old one during the renewal was answered.
    assert renewal.nodes[new_ip].others_serving_at_ready == {old_ip: True}
    assert renewal.stopped[done.old_name] > ready
    # The record points to the new address only after the readiness check passed on it.
    [(changed_at, _, _)] = [c for c in renewal.zone.changes if c[0] >= done.started]
    assert changed_at >= when[("update", "vllm-ready")].ended >= ready
    assert [a for a in done.client.answers if a.address == new_ip and a.at < changed_at] == []
    assert_drained_with_no_gap(renewal, done)


#: What changes in the stack's config between its first deployment (one zone,
#: no drain) and the renewal, and whether the successor then lands in the zone added.
CHANGES: dict[str, tuple[dict[str, Any], bool]] = {
    "drain lengthened": ({"drain_seconds": DRAIN}, False),
    "zone added, drain lengthened": ({"zones": [ZONE_A, ZONE_B], "drain_seconds": DRAIN}, True),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_drain_or_zone_changed_since_the_create_reaches_the_old_nodes_delete(
    new_renewal: Callable[[list[str] | None], Renewal], change: str
) -> None:
    """The engine hands the old node's delete the stored outputs. Created with no drain and one
    zone, then reconfigured by a `pulumi up` outside the window: the renewal's delete must wait
    the new drain, having found the successor in the zone added, so no client holding the old
    address (a cached answer, TTL 0.5 s) is cut."""
    changes, next_zone = CHANGES[change]
    renewal = new_renewal([ZONE_A])
    renewal.props = {**renewal.props, "drain_seconds": 0.0}
    assert renewal.deploy() is False
    calls = len(renewal.fake.requests)
    diff = renewal.reconfigure(**changes)
    assert diff.changes and not diff.replaces  # an update in place, no replacement
    assert len(renewal.fake.requests) == calls  # and no TPU call
    assert {k: renewal.current[k] for k in changes} == changes
    done = renew_while_asking(renewal, next_zone=next_zone)
    assert_drained_with_no_gap(renewal, done)
