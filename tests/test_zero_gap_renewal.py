"""Issue 18 item 5: a stack inside its renewal window is renewed with no gap, over real SSH.

The whole renewal runs on loopback (tests/renewal_harness.py): the provider against the TPU API
fake, the program's own remote commands on two fake VMs over real SSH, the DNS record in a fake
zone, and a client that resolves the name (honouring the TTL) and asks `/v1/models` every 20 ms
throughout. The steps run in the order `pulumi up` would run them (tests/engine_order.py,
from pulumi's step generator), on the program's own dependency graph. TTL and drain are scaled
to 0.5 s and 1.5 s. The client-visible gap is measured by tests/bench_renewal_gap.py.

The renewal with the successor beside its predecessor (the other id pair) runs through the real
Pulumi CLI and engine now (tests/test_engine_renewal.py, renew.py's own `pulumi up`). What stays
here is what that test does not reach: no capacity left in the node's zone, so that the
successor lands in the stack's next zone under the stack's own ids (v5e1 has one zone; the
real engine's order is the same step generator's, replayed by tests/engine_order.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from components import renewal as renewal_window
from components.vm.queued_resource import QueuedResourceProvider
from components.vm.queued_resource_spec import RENEWAL_SUFFIX
from scripts import renew
from tests.fakes.cloud_dns import CachingResolver, FakeManagedZone
from tests.fakes.metadata_server import FakeMetadataServer
from tests.fakes.secret_manager import FakeSecretManager
from tests.fakes.ssh_host import SshHostFactory
from tests.fakes.tpu_api import FakeTpuApi
from tests.renewal_harness import (
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


def test_a_renewal_with_no_capacity_beside_lands_in_the_next_zone_with_no_gap(
    new_renewal: Callable[[list[str] | None], Renewal],
) -> None:
    renewal = new_renewal([ZONE_A, ZONE_B])
    # Outside the window (the first node just turned ACTIVE) a refresh changes nothing.
    assert renewal.deploy() is False
    old = dict(renewal.current)
    old_name, old_ip = str(old["__id"]), str(old["external_ip"])
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
        # No capacity left beside the old node: the next zone has some.
        renewal.fake.set_zone(ZONE_A, "fail", f"There is no more capacity in {ZONE_A}")
        started = time.monotonic()
        steps = renewal.renew(delete_before_replace=False)
        time.sleep(TTL + 0.5)  # past the last cached answer
        ended = time.monotonic()
    finally:
        client.stop()

    new = renewal.current
    new_name, new_ip = str(new["__id"]), str(new["external_ip"])
    # The stack's own ids, in the next zone (beside, it would be the other pair: RENEWAL_SUFFIX).
    assert new_name == old_name.replace(f"/{ZONE_A}/", f"/{ZONE_B}/")
    assert not new_name.endswith(RENEWAL_SUFFIX)
    assert new_ip != old_ip
    when = {(s.kind, s.name): s for s in steps}
    ready = renewal.nodes[new_ip].ready_at
    # The new node became ready while the old one still served (asked directly then), and
    # every request the client sent the old one during the renewal was answered.
    assert renewal.nodes[new_ip].others_serving_at_ready == {old_ip: True}
    assert renewal.stopped[old_name] > ready
    assert [a for a in client.answers if a.address == old_ip and a.at > started]
    assert all(a.ok for a in client.answers if a.address == old_ip)
    # The record points to the new address only after the readiness check passed on it.
    [(changed_at, _, rrdatas)] = [c for c in renewal.zone.changes if c[0] >= started]
    assert rrdatas == (new_ip,)
    assert changed_at >= when[("update", "vllm-ready")].ended >= ready
    assert [a for a in client.answers if a.address == new_ip and a.at < changed_at] == []
    # The old queued resource is deleted only after the drain, and only then.
    assert renewal.stopped[old_name] - changed_at >= DRAIN
    assert when[("delete", "tpu-qr")].started >= max(s.ended for s in steps if s.kind != "delete")
    assert renewal.fake.state(old_name) is None
    assert renewal.fake.state(new_name) == "ACTIVE"
    # Both nodes answered throughout: not one request failed, and the client moved over.
    assert client.failures(started, ended) == []
    assert {a.address for a in client.answers if a.at > started} == {old_ip, new_ip}
    assert client.answers[-1].address == new_ip and client.answers[-1].ok
