"""VM backend: the renewal window, its config, the provider's create-before-replace
inside it, the drain before a replaced node is deleted, and what the program orders after it.

The provider runs against the loopback TPU v2alpha1 fake (tests/support/fakes/tpu_api.py) with props
as the engine hands them over (numbers as floats, `__provider`). The fake ends a run 4 h after
ACTIVE, so a lead longer than that puts a fresh TPU inside its window at once and a short one
keeps it outside.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from typing import Any

import pytest
import yaml
from pulumi.runtime import mocks

from components import catalog, renewal
from components.config import RENEWAL_PROVISIONING_SECONDS, parse_duration
from components.naming import resource_id
from components.vm.queued_resource import QueuedResourceProvider
from components.vm.queued_resource_create import ADOPT_CLOCK_SKEW_SECONDS, _ZoneAttempt
from components.vm.queued_resource_spec import RENEWAL_SUFFIX, REQUEST_LABEL, Spec
from components.vm.tpu import FlexStartTpuArgs, queued_resource_args
from components.vm.tpu_api import TpuApi
from scripts import budget
from tests.support.docs import read_doc
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.mock_outputs import MANAGED_ZONE, SERVED_IMAGE, cloud_outputs
from tests.support.pulumi_program import ROOT, refused, run_program
from tests.support.queued_resource_props import FAST, SA_EMAIL, as_engine, outs_of, props_for
from tests.support.stack_config import stack_config

WORKFLOW = ROOT / ".github" / "workflows" / "renew.yml"
RUN = 4 * 3600  # both stacks' maxRunDuration
INSIDE = float(RUN + 600)  # longer than any fresh run: inside the window at once
OUTSIDE = 3600.0  # a fresh run has 4 h left
ZONE = "us-west4-a"
ZONE_B = "us-west4-b"
BASE = f"projects/test-project/locations/{ZONE}/queuedResources/tpu-vllm-v5e1"
NEXT = BASE + RENEWAL_SUFFIX
#: The stack's own ids in its second zone: where a successor goes when none fits beside.
BASE_IN_B = BASE.replace(ZONE, ZONE_B)


def props(lead: float | None, drain: float = 0.4, stack: str = "v5e1") -> dict[str, Any]:
    """The provider's props with the renewal settings scaled for a test."""
    return {**props_for(stack), "renewal_lead_seconds": lead, "drain_seconds": drain}


# -- the config key ---------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "lead"), [("v5e1", 4800), ("v6e4", 5100)])
def test_default_lead_is_detection_capacity_wait_provisioning_warm_start_and_drain(
    stack: str, lead: int
) -> None:
    """v5e1: 30 min (two schedule periods: one scheduled run may be dropped) + 30 min + 5 min
    + 497 s (seed 000's warm start) + 3 min = 76.3 min, up to 80 min; v6e4: the same with v6e's
    estimated 994 s = 84.6 min, up to 85 min."""
    run = run_program(stack)
    family = "v5e" if stack == "v5e1" else "v6e"
    assert renewal.detection_seconds() == 2 * renewal.SCHEDULE_MINUTES * 60
    parts = (
        renewal.detection_seconds()
        + parse_duration("30m")
        + RENEWAL_PROVISIONING_SECONDS
        + catalog.WARM_START_SECONDS[family]
        + renewal.DEFAULT_DRAIN_SECONDS
    )
    assert parts <= lead < parts + 300
    assert run.outputs["renewal_lead_seconds"] == lead
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert qr.inputs["renewal_lead_seconds"] == lead
    assert qr.inputs["drain_seconds"] == renewal.DEFAULT_DRAIN_SECONDS == 180


def test_the_lead_follows_the_capacity_wait_and_the_key() -> None:
    longer = run_program("v5e1", {"tpu-vllm:tpu.capacityWait": "1h"})
    assert longer.outputs["renewal_lead_seconds"] == 4800 + 1800
    chosen = run_program("v5e1", {"tpu-vllm:renewal.lead": "45m", "tpu-vllm:renewal.drain": "5m"})
    assert chosen.outputs["renewal_lead_seconds"] == 2700
    [qr] = [r for r in chosen.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert (qr.inputs["renewal_lead_seconds"], qr.inputs["drain_seconds"]) == (2700, 300)


@pytest.mark.parametrize("lead", ["4h", "5h", "240m"])
def test_a_lead_not_shorter_than_the_run_is_refused_before_anything_exists(lead: str) -> None:
    error = refused(
        "v5e1",
        {"tpu-vllm:renewal.lead": lead},
        "tpu-vllm:renewal.lead",
        [f"'{lead}'", "not shorter than tpu-vllm:tpu.maxRunDuration (4 h)", "Fix:"],
    )
    assert "None" not in str(error)


@pytest.mark.parametrize(
    ("changes", "key", "text"),
    [
        ({"tpu-vllm:renewal.lead": "soon"}, "tpu-vllm:renewal.lead", "not a duration"),
        ({"tpu-vllm:renewal.lead": "0s"}, "tpu-vllm:renewal.lead", "not a duration"),
        ({"tpu-vllm:renewal.drain": "later"}, "tpu-vllm:renewal.drain", "not a duration"),
        (
            {"tpu-vllm:dns.managedZone": MANAGED_ZONE, "tpu-vllm:renewal.drain": "30s"},
            "tpu-vllm:renewal.drain",
            "shorter than the DNS record's TTL (60 s)",
        ),
        ({"tpu-vllm:renewal.laed": "1h"}, "tpu-vllm:renewal.laed", "did you mean `lead`"),
    ],
    ids=["lead", "zero lead", "drain", "drain under ttl", "typo"],
)
def test_bad_renewal_settings_are_refused(changes: dict[str, Any], key: str, text: str) -> None:
    refused("v5e1", changes, key, [text])


def test_a_short_drain_without_dns_is_accepted() -> None:
    run = run_program("v5e1", {"tpu-vllm:renewal.drain": "30s"})
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert qr.inputs["drain_seconds"] == 30


def test_a_lead_inside_one_schedule_period_warns() -> None:
    run = run_program("v5e1", {"tpu-vllm:renewal.lead": "10m"})
    assert any("renewal.lead" in w and "renew schedule's period" in w for w in run.warnings)


def test_a_default_lead_that_does_not_fit_a_short_run_is_halved_with_a_warning() -> None:
    run = run_program("v5e1", {"tpu-vllm:tpu.maxRunDuration": "1h"})
    assert run.outputs["renewal_lead_seconds"] == 1800
    [warning] = [w for w in run.warnings if "renewal.lead" in w]
    assert "not shorter than tpu.maxRunDuration (1 h)" in warning and "Fix:" in warning


def test_spot_has_no_window() -> None:
    run = run_program(
        "v5e1",
        {
            "tpu-vllm:tpu.provisioning": "spot",
            "tpu-vllm:tpu.maxRunDuration": None,
            "tpu-vllm:renewal.lead": "1h",
        },
    )
    assert "renewal_lead_seconds" not in run.outputs
    assert any("renewal.lead is set" in w and "ignored" in w for w in run.warnings)


# -- the schedule is shorter than the lead ----------------------------------------------------


def _field(text: str, low: int, high: int) -> list[int]:
    """The values a cron field (`*`, `*/15`, `7-59/15`, `0,30`, `5`) selects."""
    values: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            start, end = low, high
        elif "-" in span:
            start, end = (int(v) for v in span.split("-"))
        else:
            start = end = int(span)
            if step:
                end = high
        values.update(range(start, end + 1, int(step or 1)))
    return sorted(values)


def cron_period_minutes(cron: str) -> int:
    """The longest wait between two runs of a `M H * * *` schedule, in minutes."""
    minute, hour, day, month, weekday = cron.split()
    assert (day, month, weekday) == ("*", "*", "*"), f"day fields not modelled: {cron}"
    runs = [h * 60 + m for h in _field(hour, 0, 23) for m in _field(minute, 0, 59)]
    return max(b - a for a, b in zip(runs, [*runs[1:], runs[0] + 24 * 60], strict=True))


@pytest.mark.parametrize(
    ("cron", "period"),
    [("*/15 * * * *", 15), ("7-59/15 * * * *", 15), ("0 * * * *", 60), ("5,20 */2 * * *", 105)],
)
def test_cron_period(cron: str, period: int) -> None:
    assert cron_period_minutes(cron) == period


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_the_renew_schedule_runs_more_often_than_the_lead(stack: str) -> None:
    """A check must fall inside every window: the workflow's longest wait between two runs is
    shorter than the stack's lead (docs/renewal.md says why), with room for a start."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))
    [schedule] = triggers["schedule"]
    period = cron_period_minutes(schedule["cron"]) * 60
    lead = run_program(stack).outputs["renewal_lead_seconds"]
    assert period < lead
    # The default lead counts on this period, and on one more for a dropped run.
    assert period <= renewal.SCHEDULE_MINUTES * 60
    assert period * (1 + renewal.DROPPED_RUNS_ALLOWED) <= renewal.detection_seconds()


# -- the provider's diff ---------------------------------------------------------------------


def active(lead: float | None, termination_in: float) -> dict[str, Any]:
    """Old outputs of an ACTIVE TPU whose run ends `termination_in` seconds from now."""
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + termination_in))
    return {**props(lead), "zone": ZONE, "state": "ACTIVE", "termination_time": ends}


def test_inside_the_window_the_diff_replaces_creating_first() -> None:
    diff = QueuedResourceProvider().diff(BASE, active(3900, 1800), props(3900))
    assert diff.changes
    assert diff.replaces == ["termination_time"]
    assert diff.delete_before_replace is False


@pytest.mark.parametrize(
    ("lead", "left"),
    [(3900, 7200), (None, 60), (0, 60)],
    ids=["more left than the lead", "no lead (spot, old state)", "zero lead"],
)
def test_outside_the_window_the_diff_is_no_change(lead: float | None, left: float) -> None:
    diff = QueuedResourceProvider().diff(BASE, active(lead, left), props(lead))
    assert not diff.changes and not diff.replaces


def test_a_changed_lead_or_drain_is_stored_in_place_not_replaced() -> None:
    """The node's delete sees only the stored outputs: a drain changed since the create must
    be stored (an update), or the replaced node would drain the old one."""
    olds = active(3900, 7200)
    provider = QueuedResourceProvider()
    for news in (props(4500), props(3900, drain=600), props(4500, drain=600)):
        diff = provider.diff(BASE, olds, news)
        assert diff.changes and not diff.replaces
        stored = outs_of(provider.update(BASE, olds, news))
        assert (stored["renewal_lead_seconds"], stored["drain_seconds"]) == (
            news["renewal_lead_seconds"],
            news["drain_seconds"],
        )


def test_inside_the_window_a_changed_drain_or_zone_list_is_stored_before_the_renewal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A renewal in the same `pulumi up` would delete this node with the old drain, looking
    for its successor in the old zones only: the change is stored first, and the next up
    renews. A lead changed alone is read from the new inputs: the renewal goes ahead."""
    provider = QueuedResourceProvider()
    olds = active(3900, 1800)
    for news in (props(3900, drain=600), {**props(3900), "zones": [ZONE, ZONE_B]}):
        diff = provider.diff(BASE, olds, news)
        assert diff.changes and not diff.replaces
        assert "renewal follows at the next `pulumi up`" in capsys.readouterr().err
        stored = {**outs_of(provider.update(BASE, olds, news)), "__provider": "x"}
        renewing = provider.diff(BASE, stored, news)  # the next up
        assert renewing.replaces == ["termination_time"]
        assert renewing.delete_before_replace is False
    lead_only = provider.diff(BASE, olds, props(4500))
    assert lead_only.replaces == ["termination_time"]


def test_a_plain_up_without_refresh_renews_an_ended_run_when_a_lead_is_set() -> None:
    """Without `--refresh` the diff gets the state as stored (ACTIVE), but it
    compares the stored end with now: a run past its end is inside the window and is renewed
    create-first (the create then steps around the SUSPENDED predecessor: see
    test_a_predecessor_that_ended_since_the_diff_is_stepped_around). Without a lead, nothing
    tells it. docs/operations.md must say so."""
    provider = QueuedResourceProvider()
    ended = active(3900, -60)  # the state still says ACTIVE; its end was a minute ago
    diff = provider.diff(BASE, ended, props(3900))
    assert diff.replaces == ["termination_time"] and diff.delete_before_replace is False
    unleaded = {**active(None, -60), "renewal_lead_seconds": None}
    assert not provider.diff(BASE, unleaded, props(None)).changes
    page = " ".join(read_doc("operations").split())
    assert "does not notice the expiry" not in page
    assert "compares the `expires_at` stored in the state with the current time" in page
    assert "What only `--refresh` notices" in page


def test_an_ended_tpu_or_a_spec_change_is_still_replaced_deleting_first() -> None:
    provider = QueuedResourceProvider()
    ended = {**active(3900, 1800), "state": "SUSPENDED"}
    assert provider.diff(BASE, ended, props(3900)).delete_before_replace
    respec = {**props(3900), "runtime_version": "v2-alpha-tpuv5-lite-b"}
    diff = provider.diff(BASE, active(3900, 1800), respec)
    assert diff.replaces == ["runtime_version"] and diff.delete_before_replace


# -- both exist at once, under their own ids ---------------------------------------------------


def test_the_successor_is_created_beside_the_tpu_it_renews(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    first = provider.create(props(INSIDE))
    assert first.id == BASE
    second = provider.create(props(INSIDE))  # the create step of a create-before-replace
    assert second.id == NEXT
    outs = outs_of(second)
    assert outs["qr_name"] == NEXT
    assert outs["node_name"].endswith("/nodes/tpu-vllm-v5e1-node" + RENEWAL_SUFFIX)
    assert outs["qr_id"] == "tpu-vllm-v5e1"  # the input stays: the next diff is no change
    assert outs["external_ip"] != outs_of(first)["external_ip"]
    assert tpu_env.state(BASE) == tpu_env.state(NEXT) == "ACTIVE"  # both serve at once
    refreshed = provider.read(NEXT, outs)
    assert outs_of(refreshed)["node_name"] == outs["node_name"]
    assert outs_of(refreshed)["external_ip"] == outs["external_ip"]
    # Its stored ids are the stack's own: once outside the window (a lead stored shorter than
    # what is left), the next diff against the unchanged config is no change.
    later = {**outs_of(refreshed), "renewal_lead_seconds": OUTSIDE}
    assert not provider.diff(NEXT, later, props(OUTSIDE)).changes
    # The next renewal goes back to the stack's own ids, once the old pair is deleted.
    provider.delete(BASE, {**outs_of(first), "drain_seconds": 0.0})
    third = provider.create(props(INSIDE))
    assert third.id == BASE


def test_a_predecessor_that_ended_since_the_diff_is_stepped_around(
    tpu_env: FakeTpuApi,
) -> None:
    """The diff saw it ACTIVE inside its window; by the create its run had ended (SUSPENDED,
    still holding its ids until Pulumi deletes it at the end of the update)."""
    provider = QueuedResourceProvider()
    provider.create(props(INSIDE))
    tpu_env.expire(BASE)
    assert tpu_env.wait_for_state(BASE, "SUSPENDED", timeout=5) == "SUSPENDED"
    assert provider.create(props(INSIDE)).id == NEXT


def test_a_refresh_inside_the_window_says_what_up_will_do(
    tpu_env: FakeTpuApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    provider = QueuedResourceProvider()
    created = provider.create(props(INSIDE))
    capsys.readouterr()
    provider.read(BASE, outs_of(created))
    err = capsys.readouterr().err
    assert f"{BASE}: ACTIVE with 4 h of its run left, inside the renewal window" in err
    assert "requests the next TPU beside it (create before delete)" in err


def test_ids_held_by_a_tpu_outside_its_window_stop_the_create(tpu_env: FakeTpuApi) -> None:
    """Not a renewal: an ACTIVE TPU with hours left under the stack's ids is something an
    interrupted run left behind. It is neither stepped around nor deleted."""
    QueuedResourceProvider().create(props(OUTSIDE))
    with pytest.raises(Exception, match="already exists, probably left by an interrupted run"):
        QueuedResourceProvider().create(props(OUTSIDE))
    assert tpu_env.state(NEXT) is None
    assert not tpu_env.requests_for("DELETE")


def test_a_node_id_held_elsewhere_stops_the_create_naming_the_node(
    tpu_env: FakeTpuApi,
) -> None:
    """ALREADY_EXISTS although no queued resource has the id: the node id is the one taken
    (the fake, like the API, keeps node ids unique per zone). Named, never retried forever."""
    spec = Spec.from_props(props(INSIDE))
    body = spec.body(ZONE)
    tpu_env.discovery_client().projects().locations().queuedResources().create(
        parent=f"projects/test-project/locations/{ZONE}", queuedResourceId="other", body=body
    ).execute()
    with pytest.raises(Exception, match="the node id tpu-vllm-v5e1-node is probably held"):
        QueuedResourceProvider().create(props(INSIDE))
    assert len(tpu_env.requests_for("queuedResources.create")) == 2


def two_zones(lead: float | None, drain: float = 0.4) -> dict[str, Any]:
    return {**props(lead, drain), "zones": [ZONE, ZONE_B]}


def test_a_successor_with_no_room_beside_its_predecessor_goes_to_the_next_zone_and_drains(
    tpu_env: FakeTpuApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Zone A has no capacity for the successor, zone B has: the successor takes the stack's
    own ids there (the other pair is taken only beside the predecessor). The old node is still
    drained before it is deleted: the successor is found under either pair in any zone."""
    provider = QueuedResourceProvider()
    old = outs_of(provider.create(two_zones(INSIDE, drain=1.0)))
    assert old["qr_name"] == BASE
    tpu_env.set_zone(ZONE, "fail", f"There is no more capacity in the zone {ZONE}")
    new = provider.create(two_zones(INSIDE, drain=1.0))
    assert new.id == BASE_IN_B
    assert outs_of(new)["zone_errors"] and tpu_env.state(NEXT) is None  # tried, cleaned up
    capsys.readouterr()
    ended = deleting_at(tpu_env, BASE)
    started = time.monotonic()
    provider.delete(BASE, old)
    assert ended and ended[0] - started >= 1.0  # served on through the drain
    assert tpu_env.state(BASE) is None and tpu_env.state(BASE_IN_B) == "ACTIVE"
    assert f"draining {BASE}: its successor {BASE_IN_B} serves" in capsys.readouterr().err


def test_a_zone_added_since_the_create_is_searched_for_the_successor_by_the_delete(
    tpu_env: FakeTpuApi,
) -> None:
    """Created with one zone, the stack adds a second; its renewal finds no
    room beside the old node and lands in the new zone. The old node's delete gets the stored
    outputs only: once the diff stored the new zone list in place, it finds the successor there
    and drains; with the zones of the create it would delete at once."""
    provider = QueuedResourceProvider()
    created = provider.create(props(OUTSIDE, drain=1.0))
    olds = {**props(OUTSIDE, drain=1.0), **outs_of(created)}
    news = two_zones(OUTSIDE, drain=1.0)
    calls = len(tpu_env.requests)
    diff = provider.diff(BASE, olds, news)
    assert diff.changes and not diff.replaces
    stored = outs_of(provider.update(BASE, olds, news))
    assert stored["zones"] == [ZONE, ZONE_B] and len(tpu_env.requests) == calls
    tpu_env.set_zone(ZONE, "fail", f"There is no more capacity in the zone {ZONE}")
    assert provider.create({**news, "renewal_lead_seconds": INSIDE}).id == BASE_IN_B
    ended = deleting_at(tpu_env, BASE)
    started = time.monotonic()
    provider.delete(BASE, {**stored, "__provider": "x"})
    assert ended and ended[0] - started >= 1.0  # served on through the drain
    assert tpu_env.state(BASE) is None and tpu_env.state(BASE_IN_B) == "ACTIVE"


def test_a_failed_first_send_then_409_does_not_adopt_the_tpu_being_renewed(
    tpu_env: FakeTpuApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Inside the window the successor's create is answered 503 (not carried out); the
    library's retry, same requestId, meets the predecessor's ids: 409. That node is not this
    request's (its node lacks the request's label), so it is neither adopted nor deleted, and
    the successor is requested beside it."""
    provider = QueuedResourceProvider()
    old = provider.create(props(INSIDE))
    tpu_env.fail_next(1, 503, methods=["queuedResources.create"])
    new = provider.create(props(INSIDE))
    assert old.id == BASE and new.id == NEXT
    assert tpu_env.state(BASE) == tpu_env.state(NEXT) == "ACTIVE"
    assert not tpu_env.requests_for("DELETE")
    creates = tpu_env.requests_for("queuedResources.create")
    assert [r.status for r in creates] == [200, 503, 409, 200]
    assert creates[1].query["requestId"] == creates[2].query["requestId"]
    assert "not adopting it" in capsys.readouterr().err
    # The node the successor's create made carries that create's request id.
    labels = tpu_env.queued_resource(NEXT)["tpu"]["nodeSpec"][0]["node"]["labels"]
    assert labels[REQUEST_LABEL] == creates[3].query["requestId"]


def _qr(created: float, labels: dict[str, str] | None) -> dict[str, Any]:
    """A queued resource as GET answers it, SUSPENDED (no node), labels shown or not."""
    node: dict[str, Any] = {"acceleratorType": "v5litepod-1", "runtimeVersion": "x"}
    if labels is not None:
        node["labels"] = labels
    return {
        "createTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
        "state": {"state": "SUSPENDED"},
        "tpu": {"nodeSpec": [{"nodeId": "tpu-vllm-v5e1-node", "node": node}]},
    }


def test_what_a_retried_create_adopts_is_told_by_its_label_else_by_its_create_time(
    tpu_env: FakeTpuApi,
) -> None:
    attempt = _ZoneAttempt(TpuApi(), Spec.from_props(props(INSIDE)), ZONE)
    attempt.sent_at = time.time()
    mine = {REQUEST_LABEL: attempt.request_id}
    assert attempt._made_here(_qr(attempt.sent_at, mine))
    assert not attempt._made_here(_qr(attempt.sent_at, {"stack": "v5e1"}))
    # No labels shown: created after the first send (less the clock skew) is this request's.
    assert attempt._made_here(_qr(attempt.sent_at + 1, None))
    assert attempt._made_here(_qr(attempt.sent_at - ADOPT_CLOCK_SKEW_SECONDS / 2, None))
    assert not attempt._made_here(_qr(attempt.sent_at - 3 * 3600, None))


# -- stacks `foo` and `foo-b` share an id ----------------------------------------------------------


def props_of_stack(stack: str, lead: float | None, drain: float = 0.4) -> dict[str, Any]:
    """The props stack `stack` would send: v5e1's stack file under another stack name."""
    config = dataclasses.replace(stack_config("v5e1"), stack=stack)
    raw = queued_resource_args(
        FlexStartTpuArgs.of(config, SERVED_IMAGE, {"enable-guest-attributes": "TRUE"}),
        service_account_email=SA_EMAIL,
        network_tag=resource_id(stack),
        timing=FAST,
    ).props()
    return {
        **as_engine(raw),
        "__provider": "opaque",
        "renewal_lead_seconds": lead,
        "drain_seconds": drain,
    }


def test_a_stack_named_like_the_renewal_ids_is_never_taken_for_a_successor(
    tpu_env: FakeTpuApi,
) -> None:
    """Stack v5e1-b's own queued resource is `tpu-vllm-v5e1-b`, stack v5e1's renewal id. Its
    node's labels name stack v5e1-b, so v5e1's destroy does not drain for it."""
    provider = QueuedResourceProvider()
    other = provider.create(props_of_stack("v5e1-b", INSIDE))
    assert other.id == NEXT  # the collision
    old = outs_of(provider.create(props(INSIDE, drain=5.0)))
    started = time.monotonic()
    provider.delete(BASE, old)
    assert time.monotonic() - started < 5.0  # no drain: nothing of this stack serves on
    assert tpu_env.state(BASE) is None and tpu_env.state(NEXT) == "ACTIVE"


def test_a_renewal_steps_past_another_stacks_tpu_under_its_renewal_ids(
    tpu_env: FakeTpuApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Stack v5e1 renews inside its window; beside its node, the renewal ids hold stack
    v5e1-b's TPU. That is neither this stack's predecessor nor touched: the successor goes to
    the next zone under the stack's own ids."""
    provider = QueuedResourceProvider()
    provider.create(props_of_stack("v5e1-b", INSIDE))
    old = outs_of(provider.create(two_zones(INSIDE)))
    assert old["qr_name"] == BASE
    new = provider.create(two_zones(INSIDE))
    assert new.id == BASE_IN_B
    [reason] = outs_of(new)["zone_errors"]
    assert f"{NEXT} is not this stack's TPU: its node is tpu-vllm-v5e1-b-node" in reason
    assert "(label stack=v5e1-b)" in reason and "Fix: rename" in reason
    assert tpu_env.state(NEXT) == tpu_env.state(BASE) == "ACTIVE"
    assert not tpu_env.requests_for("DELETE")


def test_a_stack_named_like_the_renewal_ids_does_not_renew_another_stacks_tpu(
    tpu_env: FakeTpuApi,
) -> None:
    """Stack v5e1-b's first create meets stack v5e1's successor (inside its window) under its
    own ids. It is not v5e1-b's predecessor: the create stops, naming the clash, and the other
    stack's node is left alone."""
    provider = QueuedResourceProvider()
    provider.create(props(INSIDE))
    assert provider.create(props(INSIDE)).id == NEXT  # v5e1's renewal holds tpu-vllm-v5e1-b
    with pytest.raises(
        Exception, match=r"node is tpu-vllm-v5e1-node-b \(label stack=v5e1\)"
    ) as caught:
        provider.create(props_of_stack("v5e1-b", INSIDE))
    assert "Fix: rename one of the stacks" in str(caught.value)
    assert tpu_env.state(NEXT + RENEWAL_SUFFIX) is None
    assert tpu_env.state(NEXT) == tpu_env.state(BASE) == "ACTIVE"
    assert not tpu_env.requests_for("DELETE")


# -- the drain ----------------------------------------------------------------------------------


def deleting_at(fake: FakeTpuApi, name: str) -> list[float]:
    """Watch `name` in the fake; the list gets the time it stopped being ACTIVE."""
    seen: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if fake.state(name) != "ACTIVE":
                seen.append(time.monotonic())
                return
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return seen


def test_a_replaced_tpu_serves_on_for_the_drain_then_is_deleted(
    tpu_env: FakeTpuApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    provider = QueuedResourceProvider()
    old = outs_of(provider.create(props(INSIDE, drain=1.0)))
    provider.create(props(INSIDE, drain=1.0))
    capsys.readouterr()
    ended = deleting_at(tpu_env, BASE)
    started = time.monotonic()
    provider.delete(BASE, old)
    assert tpu_env.state(BASE) is None and tpu_env.state(NEXT) == "ACTIVE"
    assert ended and ended[0] - started >= 1.0  # ACTIVE throughout the drain
    err = capsys.readouterr().err
    assert f"draining {BASE}: its successor {NEXT} serves" in err
    assert "drained for 1 s; deleting it" in err


def test_without_a_successor_the_delete_does_not_wait(
    tpu_env: FakeTpuApi,
) -> None:
    """`pulumi destroy`, or a delete-before-replace: nothing else serves, nothing to drain."""
    provider = QueuedResourceProvider()
    old = outs_of(provider.create(props(INSIDE, drain=30.0)))
    started = time.monotonic()
    provider.delete(BASE, old)
    assert time.monotonic() - started < 10
    assert tpu_env.state(BASE) is None


def test_the_drain_ends_when_the_run_does(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    old = outs_of(provider.create(props(INSIDE, drain=30.0)))
    provider.create(props(INSIDE, drain=30.0))
    threading.Timer(0.5, tpu_env.expire, args=(BASE,)).start()
    started = time.monotonic()
    provider.delete(BASE, old)
    assert time.monotonic() - started < 10
    assert tpu_env.state(BASE) is None


# -- the name moves only to a node that serves --------------------------------------------------


def test_the_record_waits_for_the_servers_readiness() -> None:
    """The A record's address depends on the readiness command (startup complete, /health,
    /v1/models): Pulumi changes the record only after that command succeeded on the node."""
    run = run_program("v5e1", {"tpu-vllm:dns.managedZone": MANAGED_ZONE})
    assert "vllm-ready" in run.dependencies["endpoint-name-a"]
    assert run.outputs["endpoint"] == "http://v5e1.models.example.com:8000"


def test_the_end_of_up_says_when_the_window_opens() -> None:
    run = run_program("v5e1")
    [notice] = [m for _, m in run.log if "flex-start run ends" in m]
    assert "from 1 h 20 min before it (renewal.lead, at " in notice
    assert "requests the next node beside this one" in notice
    assert "If no capacity is found before the end" in notice


# -- the output contract keeps its meaning across a renewal -----------------------------------


def test_after_a_renewal_the_outputs_name_the_new_node_and_keep_their_meaning() -> None:
    """The state after a renewal holds the successor under the other id pair: `queued_resource`
    and `node` name it, `expires_at` is its end, `renew_command` and `replicas` are unchanged."""
    ends = "2026-12-01T04:00:00Z"

    def renewed(args: mocks.MockResourceArgs) -> dict[str, Any]:
        outputs = cloud_outputs(args)
        if args.typ == "pulumi-python:dynamic:Resource" and "qr_id" in args.inputs:
            outputs.update(
                qr_name=NEXT,
                node_name=f"projects/test-project/locations/{ZONE}/nodes/tpu-vllm-v5e1-node-b",
                termination_time=ends,
            )
        return outputs

    before, after = run_program("v5e1"), run_program("v5e1", outputs_for=renewed)
    assert after.outputs["queued_resource"] == NEXT
    assert after.outputs["node"].endswith("/nodes/tpu-vllm-v5e1-node" + RENEWAL_SUFFIX)
    assert after.outputs["expires_at"] == ends
    for same in ("renew_command", "replicas", "renewal_lead_seconds"):
        assert after.outputs[same] == before.outputs[same]


# -- the overlap is billed twice -----------------------------------------------------------------


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_the_overlap_is_billed_for_lead_plus_drain_at_most(stack: str) -> None:
    b = budget.budget(stack)
    assert (b.lead_s, b.drain_s) == (
        run_program(stack).outputs["renewal_lead_seconds"],
        renewal.DEFAULT_DRAIN_SECONDS,
    )
    assert b.overlap_usd == pytest.approx(round(b.hourly_usd * (b.lead_s + b.drain_s) / 3600, 2))
    # The tight bound: the old node ends at its run end, drained or not.
    assert b.overlap_tight_usd == pytest.approx(round(b.hourly_usd * b.lead_s / 3600, 2))
    assert b.max_run_usd == pytest.approx(round(b.hourly_usd * 4, 2))  # still one run
    table = budget.render_table([stack])
    row = next(line for line in table.splitlines() if "billed twice" in line)
    assert re.search(r"\$\d", row) and budget.duration(b.lead_s) in row
    tighter = re.search(r"tighter: \$([\d.]+) \(([^)]+)\) \|", row)
    assert "loose bound" in row and tighter
    assert float(tighter[1]) == pytest.approx(b.overlap_tight_usd)
    assert tighter[2] == budget.duration(b.lead_s)
