"""The queued-resource dynamic provider against the loopback TPU v2alpha1 fake.

The fake rejects any body the bundled discovery document does not allow, so a create that
succeeds here sent a body of the documented shape. Props are passed the way the engine hands
them over (numbers as floats), and the timing is shrunk so a full lifecycle takes a second.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi.dynamic as dyn
import pytest
from googleapiclient.errors import HttpError

from components.vm import queued_resource_delete
from components.vm.queued_resource import QueuedResourceProvider
from components.vm.queued_resource_spec import OUTPUT_KEYS, Spec
from tests.support.docs import read_doc, section
from tests.support.fakes.tpu_api import FakeTpuApi, ManualClock, StateDurations
from tests.support.pulumi_program import ROOT, run_program
from tests.support.queued_resource_props import SA_EMAIL, outs_of, props_for
from tests.support.stack_config import stack_config

REJECTION = 'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1"'
UNAVAILABLE_V6E = 'Accelerator type "v6e-4" is not available in zone southamerica-west1-a.'


def create_bodies(fake: FakeTpuApi) -> list[dict[str, Any]]:
    return [
        r.body
        for r in fake.requests
        if r.method == "POST" and r.status == 200 and r.path.endswith("/queuedResources")
    ]


@pytest.mark.parametrize(
    ("stack", "accelerator", "runtime"),
    [("v5e1", "v5litepod-1", "v2-alpha-tpuv5-lite"), ("v6e4", "v6e-4", "v2-alpha-tpuv6e")],
)
def test_create_sends_a_valid_flex_start_body_and_waits_for_active(
    tpu_env: FakeTpuApi, stack: str, accelerator: str, runtime: str, capsys: Any
) -> None:
    props = props_for(stack)
    result = QueuedResourceProvider().create(props)
    outs = dict(result.outs or {})
    zone = stack_config(stack).tpu.zones[0]
    assert result.id == f"projects/test-project/locations/{zone}/queuedResources/tpu-vllm-{stack}"
    assert outs["state"] == "ACTIVE"
    assert outs["zone"] == zone
    assert outs["external_ip"] and outs["internal_ip"]
    assert outs["termination_time"]  # flex-start: ACTIVE time + maxRunDuration
    assert outs["node_name"].endswith(f"/nodes/tpu-vllm-{stack}-node")
    assert "__provider" not in outs
    [body] = create_bodies(tpu_env)
    assert body["provisioningModel"] == "FLEX_START"
    assert body["runDuration"] == {"maxRunDuration": "14400s"}
    assert body["queueingPolicy"] == {"validUntilDuration": "1800s"}
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert node["acceleratorType"] == accelerator
    assert node["runtimeVersion"] == runtime
    assert node["networkConfig"] == {"network": "default", "enableExternalIps": True}
    assert node["serviceAccount"] == {
        "email": SA_EMAIL,
        "scope": ["https://www.googleapis.com/auth/cloud-platform"],
    }
    # The stack's labels, and the create that made the node (its requestId): what tells this
    # stack's nodes from another's, and a node this create made from one that held its ids.
    [create] = tpu_env.requests_for("queuedResources.create")
    assert node["labels"] == {
        "stack": stack,
        "project": "tpu-vllm",
        "managed-by": "pulumi",
        "tpu-vllm-request": create.query["requestId"],
    }
    assert node["tags"] == [f"tpu-vllm-{stack}"]
    assert all(r.headers.get("authorization") == "Bearer test-token" for r in tpu_env.requests)
    # Each state change is reported for the operator.
    err = capsys.readouterr().err
    for state in ("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"):
        assert state in err


@pytest.mark.parametrize(
    ("provisioning", "model", "tier"),
    [("spot", "SPOT", {"spot": {}}), ("on-demand", "STANDARD", {})],
)
def test_spot_and_on_demand_bodies_validate(
    tpu_env: FakeTpuApi, provisioning: str, model: str, tier: dict[str, Any]
) -> None:
    props = props_for("v5e1", provisioning=provisioning, maxRunDuration=None)
    outs = outs_of(QueuedResourceProvider().create(props))
    assert outs["state"] == "ACTIVE"
    assert outs["termination_time"] is None  # no run limit: it bills until deleted
    [body] = create_bodies(tpu_env)
    assert body["provisioningModel"] == model
    assert "runDuration" not in body
    assert {k: body[k] for k in ("spot",) if k in body} == tier


def test_failed_request_raises_with_the_api_message_and_cleans_up(tpu_env: FakeTpuApi) -> None:
    tpu_env.set_zone("us-west4-a", "fail", "There is no more capacity in the zone us-west4-a")
    with pytest.raises(Exception, match="There is no more capacity in the zone us-west4-a"):
        QueuedResourceProvider().create(props_for("v5e1"))
    assert tpu_env.state("tpu-vllm-v5e1") is None  # deleted again: nothing left billing


def test_transient_429_and_503_are_retried(tpu_env: FakeTpuApi) -> None:
    tpu_env.fail_next(2, status=503)
    tpu_env.fail_next(1, status=429, methods=["get"])
    outs = outs_of(QueuedResourceProvider().create(props_for("v5e1")))
    assert outs["state"] == "ACTIVE"
    assert sum(1 for r in tpu_env.requests if r.status == 503) == 2
    assert sum(1 for r in tpu_env.requests if r.status == 429) == 1


def test_zone_failover_past_a_rejecting_zone(tpu_env: FakeTpuApi) -> None:
    zones = ["southamerica-west1-a", "us-east5-a", "europe-west4-a"]
    tpu_env.set_zone(zones[0], "reject_invalid_argument", UNAVAILABLE_V6E)
    outs = outs_of(QueuedResourceProvider().create(props_for("v6e4")))
    assert outs["zone"] == "us-east5-a"
    assert outs["state"] == "ACTIVE"
    assert any("southamerica-west1-a" in e and "INVALID_ARGUMENT" in e for e in outs["zone_errors"])


def test_all_zones_failing_lists_each_zone_and_leaves_nothing(tpu_env: FakeTpuApi) -> None:
    tpu_env.seconds_per_run_second = 0.0005  # the 1800 s capacity wait lasts ~1 s
    tpu_env.set_zone("southamerica-west1-a", "reject_invalid_argument", UNAVAILABLE_V6E)
    tpu_env.set_zone("us-east5-a", "resource_exhausted", "Quota TPUV6E exceeded")
    tpu_env.set_zone("europe-west4-a", "never_capacity")
    with pytest.raises(Exception) as caught:
        QueuedResourceProvider().create(props_for("v6e4"))
    message = str(caught.value)
    assert "southamerica-west1-a: INVALID_ARGUMENT" in message and UNAVAILABLE_V6E in message
    assert "us-east5-a: RESOURCE_EXHAUSTED" in message
    assert "europe-west4-a: FAILED" in message
    for zone in ("southamerica-west1-a", "us-east5-a", "europe-west4-a"):
        assert (
            tpu_env.state(f"projects/test-project/locations/{zone}/queuedResources/tpu-vllm-v6e4")
            is None
        )


def test_flex_start_rejection_is_skipped_like_seed_000(tpu_env: FakeTpuApi) -> None:
    tpu_env.set_zone("europe-west4-c", "reject_invalid_argument", REJECTION)
    props = props_for("v5e1")
    props["zones"] = ["europe-west4-c", "us-west4-a"]
    outs = outs_of(QueuedResourceProvider().create(props))
    assert outs["zone"] == "us-west4-a"
    assert REJECTION in outs["zone_errors"][0]


def test_delete_while_active_forces_and_waits_until_gone(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    provider.delete(created.id, {**props, **outs_of(created)})
    deletes = [r for r in tpu_env.requests if r.method == "DELETE"]
    assert deletes and deletes[0].query.get("force") == "true"
    assert tpu_env.state(created.id) is None


def _start_request_directly(fake: FakeTpuApi, props: dict[str, Any]) -> str:
    spec = Spec.from_props(props)
    zone = spec.zones[0]
    fake.discovery_client().projects().locations().queuedResources().create(
        parent=f"projects/{spec.project}/locations/{zone}",
        queuedResourceId=spec.qr_id,
        body=spec.body(zone),
    ).execute()
    return spec.qr_name(zone)


def test_delete_while_provisioning_is_retried_until_allowed(tpu_env: FakeTpuApi) -> None:
    tpu_env.durations = StateDurations(0.05, 0.05, 0.05, provisioning=1.0)
    props = props_for("v5e1")
    name = _start_request_directly(tpu_env, props)
    assert tpu_env.wait_for_state(name, "PROVISIONING", timeout=5)
    QueuedResourceProvider().delete(name, props)
    rejected = [r for r in tpu_env.requests if r.method == "DELETE" and r.status == 400]
    assert rejected, "the fake should have refused the delete while PROVISIONING"
    assert tpu_env.state(name) is None


def test_delete_while_provisioning_gives_up_with_a_clear_error(tpu_env: FakeTpuApi) -> None:
    tpu_env.durations = StateDurations(0.05, 0.05, 0.05, provisioning=60.0)
    props = props_for("v5e1")
    props["timing"] = {**props["timing"], "delete_timeout_seconds": 0.5}
    name = _start_request_directly(tpu_env, props)
    assert tpu_env.wait_for_state(name, "PROVISIONING", timeout=5)
    with pytest.raises(Exception, match="cannot be deleted while it is PROVISIONING"):
        QueuedResourceProvider().delete(name, props)


def test_delete_after_it_is_already_gone_succeeds(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    tpu_env.discovery_client().projects().locations().queuedResources().delete(
        name=created.id, force=True
    ).execute()
    assert tpu_env.wait_for_state(created.id, "GONE", timeout=5) is None
    provider.delete(created.id, {**props, **outs_of(created)})  # 404 counts as deleted
    assert any(r.method == "DELETE" and r.status == 404 for r in tpu_env.requests)


def test_refresh_after_expiry_reports_suspended_and_diff_replaces(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    tpu_env.expire(created.id)
    assert tpu_env.wait_for_state(created.id, "SUSPENDED", timeout=5) == "SUSPENDED"
    refreshed = provider.read(created.id, {**props, **outs_of(created)})
    assert refreshed.id == created.id
    assert outs_of(refreshed)["state"] == "SUSPENDED"
    assert outs_of(refreshed)["external_ip"] is None  # the node was deleted with the run
    diff = provider.diff(created.id, outs_of(refreshed), props)
    assert diff.changes and "state" in (diff.replaces or [])
    assert diff.delete_before_replace
    # Deleting the suspended request (it still counts against quota) works too.
    provider.delete(created.id, outs_of(refreshed))
    assert tpu_env.state(created.id) is None


def test_refresh_right_after_the_run_ends_sees_no_node_and_replaces(tpu_env: FakeTpuApi) -> None:
    """The run has just ended: the queued resource is SUSPENDING and its node is already gone
    (404; Cloud TPU flex-start docs, modelled by the fake). A refresh in that window must not
    fail on the missing node, must not report the dead node's addresses, and must replace."""
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    tpu_env.durations.suspending = 60.0  # hold the request in SUSPENDING for this test
    tpu_env.expire(created.id)
    assert tpu_env.state(created.id) == "SUSPENDING"
    node = tpu_env.discovery_client().projects().locations().nodes()
    with pytest.raises(HttpError) as gone:
        node.get(name=outs_of(created)["node_name"]).execute()
    assert gone.value.resp.status == 404
    refreshed = outs_of(provider.read(created.id, {**props, **outs_of(created)}))
    assert refreshed["state"] == "SUSPENDING"
    assert refreshed["external_ip"] is None and refreshed["internal_ip"] is None
    assert refreshed["termination_time"] == outs_of(created)["termination_time"]
    diff = provider.diff(created.id, refreshed, props)
    assert diff.changes and "state" in (diff.replaces or [])
    provider.delete(created.id, refreshed)  # the replacement deletes it first
    assert tpu_env.state(created.id) is None


def test_refresh_of_a_deleted_request_reports_it_gone(tpu_env: FakeTpuApi) -> None:
    name = "projects/test-project/locations/us-west4-a/queuedResources/tpu-vllm-v5e1"
    result = QueuedResourceProvider().read(name, props_for("v5e1"))
    assert not result.id


def test_diff_replaces_on_spec_change_but_not_on_timing_or_kept_zone() -> None:
    provider = QueuedResourceProvider()
    olds = {**props_for("v6e4"), "zone": "us-east5-a", "state": "ACTIVE"}
    same = provider.diff("id", olds, props_for("v6e4"))
    assert not same.changes
    runtime = provider.diff("id", olds, props_for("v6e4", runtimeVersion="v2-alpha-tpuv6e-b"))
    assert runtime.changes and runtime.replaces == ["runtime_version"]
    bigger = {**props_for("v6e4"), "accelerator_type": "v6e-8"}
    assert "accelerator_type" in (provider.diff("id", olds, bigger).replaces or [])
    longer = provider.diff("id", olds, props_for("v6e4", maxRunDuration="8h"))
    assert "max_run_seconds" in (longer.replaces or [])
    moved = provider.diff("id", olds, props_for("v6e4", zones=["europe-west4-a"]))
    assert moved.changes and "zones" in (moved.replaces or [])


def test_a_timing_or_zone_list_change_is_an_update_in_place_with_no_tpu_call(
    tpu_env: FakeTpuApi,
) -> None:
    """The engine hands `delete` the stored outputs, and a no-change diff keeps
    them, so zones and timing changed since the create must be stored by an update, or the
    node's delete never sees them. The update replaces nothing and calls no TPU API; only an
    unchanged config is no change (the provider host never declares preview support, so any
    update previews its outputs as unknown)."""
    provider = QueuedResourceProvider()
    created = provider.create(props_for("v6e4"))
    olds = {**props_for("v6e4"), **outs_of(created)}
    zones = list(olds["zones"])
    slower = props_for("v6e4")
    slower["timing"] = {**slower["timing"], "poll_seconds": 30.0, "iam_wait_seconds": 60.0}
    reordered = props_for("v6e4", zones=list(reversed(zones)))
    kept = props_for("v6e4", zones=[olds["zone"]])
    added = props_for("v6e4", zones=[*zones, "asia-northeast1-b"])
    assert not provider.diff(created.id, olds, props_for("v6e4")).changes
    calls = len(tpu_env.requests)
    for news in (slower, reordered, kept, added):
        diff = provider.diff(created.id, olds, news)
        assert diff.changes and not diff.replaces, news["zones"]
        stored = outs_of(provider.update(created.id, olds, news))
        assert stored["zones"] == news["zones"] and stored["timing"] == news["timing"]
        # What the API said about the node is kept as it was.
        assert {k: stored[k] for k in OUTPUT_KEYS} == {k: olds[k] for k in OUTPUT_KEYS}
        assert "__provider" not in stored  # the provider host adds the new one itself
        # Stored, the new values are no change any more.
        assert not provider.diff(created.id, {**stored, "__provider": "x"}, news).changes
    assert len(tpu_env.requests) == calls  # no TPU call for any of it


def test_the_diff_sets_only_what_the_provider_host_sends() -> None:
    """The Python dynamic provider host (pulumi/dynamic/__main__.py, `Diff`)
    sends the engine `changes`, `replaces` and `deleteBeforeReplace` and drops `stables`, so a
    diff that sets `stables` claims what never reaches the engine. Checked against the host
    that is installed, then on every kind of diff this provider returns."""
    host = (Path(dyn.__file__).parent / "__main__.py").read_text()
    diff_method = host[host.index("def Diff(") : host.index("def Update(")]
    assert "result.stables" not in diff_method
    assert "deleteBeforeReplace" in diff_method and "result.replaces" in diff_method
    provider = QueuedResourceProvider()
    olds = {**props_for("v6e4"), "zone": "us-east5-a", "state": "ACTIVE"}
    ended = {**olds, "state": "SUSPENDED"}
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    due = {**olds, "termination_time": soon, "renewal_lead_seconds": 3600.0}
    news = props_for("v6e4")
    windowed = {**news, "renewal_lead_seconds": 3600.0}
    moved = props_for("v6e4", zones=[*olds["zones"], "asia-northeast1-b"])
    for old, new in ((olds, news), (ended, news), (due, windowed), (olds, moved)):
        assert provider.diff("id", old, new).stables is None


def test_provider_progress_takes_the_path_pulumi_log_takes_in_the_provider_host() -> None:
    """The provider host configures the SDK with no engine address
    (pulumi/dynamic/__main__.py `get_provider`), and then `pulumi.log.info` prints to stderr
    (pulumi/log.py), which the engine shows in the CLI: it does not go nowhere. `report`
    prints to stderr too; `pulumi.log.debug` is the one that prints nothing."""
    script = (
        "import pulumi\n"
        "from pulumi.runtime import Settings, configure\n"
        "configure(Settings(project='p', stack='stack', organization='organization'))\n"
        "pulumi.log.info('from pulumi.log')\n"
        "pulumi.log.debug('debug line')\n"
        "from components.vm.tpu_api import report\n"
        "report('from report')\n"
    )
    pipe = subprocess.PIPE
    with subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=pipe, stderr=pipe
    ) as run:
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert out == b""
    assert err.decode().splitlines() == ["info: from pulumi.log", "tpu-vllm: from report"]
    source = (ROOT / "components/vm/tpu_api.py").read_text()
    assert "goes nowhere" not in source


def test_check_reports_missing_run_limit() -> None:
    props = props_for("v5e1")
    props["max_run_seconds"] = None
    result = QueuedResourceProvider().check({}, props)
    assert [f.property for f in result.failures] == ["max_run_seconds"]


def _provider_blob() -> str:
    run = run_program("v5e1")
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    blob = qr.inputs["__provider"]
    if isinstance(blob, dict):  # the SDK marks the pickled provider secret
        blob = blob["value"]
    assert isinstance(blob, str)
    return blob


def test_provider_pickled_under_mocks_runs_in_a_fresh_process(tpu_env: FakeTpuApi) -> None:
    """As Pulumi's provider host does: a new interpreter in the project root unpickles it."""
    blob = _provider_blob()
    props = props_for("v5e1")
    script = (
        "import base64, json, sys, dill\n"
        "provider = dill.loads(base64.b64decode(sys.argv[1]))\n"
        "props = json.loads(sys.stdin.read())\n"
        "result = provider.create(props)\n"
        "print(json.dumps({'id': result.id, 'outs': result.outs}))\n"
    )
    env = {
        **os.environ,
        "TPU_API_ENDPOINT": tpu_env.base_url,
        "GOOGLE_OAUTH_ACCESS_TOKEN": tpu_env.token,
        "PYTHONPATH": "",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, blob],
        input=json.dumps(props),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outs"]["state"] == "ACTIVE"
    assert base64.b64decode(blob)  # a real dill payload, not a placeholder


def test_progress_is_reported_while_waiting(tpu_env: FakeTpuApi, capsys: Any) -> None:
    tpu_env.durations = StateDurations(0.05, 0.05, waiting_for_resources=0.6, provisioning=0.3)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            QueuedResourceProvider().create(props_for("v5e1"))
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    assert "WAITING_FOR_RESOURCES" in capsys.readouterr().err  # reported before it finishes
    thread.join(timeout=30)
    assert not errors


def test_create_without_a_service_account_lets_the_node_use_the_default(
    tpu_env: FakeTpuApi,
) -> None:
    props = props_for("v5e1")
    del props["service_account_email"]
    outs = outs_of(QueuedResourceProvider().create(props))
    assert outs["state"] == "ACTIVE"
    [body] = create_bodies(tpu_env)
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert node["serviceAccount"] == {"scope": ["https://www.googleapis.com/auth/cloud-platform"]}


# -- what the real API does that the first fake did not ---------------------------------------


def creates_in(fake: FakeTpuApi, zone: str) -> list[Any]:
    return [
        r for r in fake.requests_for("queuedResources.create") if f"/locations/{zone}/" in r.path
    ]


def left_in(fake: FakeTpuApi, zone: str, stack: str = "v5e1") -> str | None:
    return fake.state(f"projects/test-project/locations/{zone}/queuedResources/tpu-vllm-{stack}")


def with_timing(props: dict[str, Any], **changes: float) -> dict[str, Any]:
    return {**props, "timing": {**props["timing"], **changes}}


def test_create_polls_the_operation_until_done(tpu_env: FakeTpuApi) -> None:
    tpu_env.durations = StateDurations(creating=0.3)
    outs = outs_of(QueuedResourceProvider().create(props_for("v5e1")))
    assert outs["state"] == "ACTIVE"
    assert [r.status for r in tpu_env.requests_for("queuedResources.create")] == [200]
    polled = tpu_env.requests_for("operations.get")
    assert polled, "the create's Operation was never polled"
    assert all(r.status == 200 for r in polled)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (8, "There is no more capacity in the zone us-east5-a"),
        (3, 'FLEX_START provisioning model is not supported for accelerator type "v6e-4"'),
    ],
)
def test_an_operation_error_fails_over_like_an_http_error(
    tpu_env: FakeTpuApi, code: int, message: str
) -> None:
    tpu_env.set_zone("southamerica-west1-a", "operation_error", message, error_code=code)
    outs = outs_of(QueuedResourceProvider().create(props_for("v6e4")))
    assert outs["zone"] == "us-east5-a"
    [error] = outs["zone_errors"]
    assert error.startswith("southamerica-west1-a: ") and message in error
    assert "(in the operation)" in error
    assert left_in(tpu_env, "southamerica-west1-a", "v6e4") is None


def test_a_404_just_after_the_create_is_eventual_consistency(tpu_env: FakeTpuApi) -> None:
    tpu_env.visibility_delay = 0.5
    outs = outs_of(QueuedResourceProvider().create(props_for("v5e1")))
    assert outs["state"] == "ACTIVE" and outs["zone"] == "us-west4-a"
    assert outs["zone_errors"] == []
    assert any(r.status == 404 for r in tpu_env.requests_for("queuedResources.get"))


def test_a_404_after_the_grace_period_is_gone_and_cleaned_up(tpu_env: FakeTpuApi) -> None:
    tpu_env.visibility_delay = 60.0  # reads never see it during this test
    # Deletable in any state, so the machine's load cannot decide whether the cleanup's first
    # DELETE meets PROVISIONING; a refused one's retry is pinned by the scripted tests below.
    tpu_env.undeletable_states = frozenset()
    props = with_timing(props_for("v5e1"), consistency_grace_seconds=0.3)
    props["zones"] = ["us-west4-a"]
    with pytest.raises(Exception, match=r"us-west4-a: .* is gone \(404"):
        QueuedResourceProvider().create(props)
    # Deleted although reads never showed it: the delete itself sees it.
    statuses = [r.status for r in tpu_env.requests_for("DELETE")]
    assert statuses == [200], statuses
    name = "projects/test-project/locations/us-west4-a/queuedResources/tpu-vllm-v5e1"
    assert tpu_env.wait_for_state(name, "GONE", timeout=5) is None


def test_every_create_carries_a_request_id_stable_per_zone_attempt(tpu_env: FakeTpuApi) -> None:
    tpu_env.set_zone("southamerica-west1-a", "reject_invalid_argument", UNAVAILABLE_V6E)
    tpu_env.fail_next(2, status=503, methods=["queuedResources.create"])
    outs = outs_of(QueuedResourceProvider().create(props_for("v6e4")))
    assert outs["zone"] == "us-east5-a"
    first = [r.query.get("requestId") for r in creates_in(tpu_env, "southamerica-west1-a")]
    second = [r.query.get("requestId") for r in creates_in(tpu_env, "us-east5-a")]
    # 503, 503, 400 in the first zone; then 200 in the second, each zone with its own UUID.
    assert len(first) == 3 and len(set(first)) == 1
    assert len(second) == 1
    for request_id in (first[0], second[0]):
        assert request_id and str(uuid.UUID(request_id)) == request_id
    assert first[0] != second[0]


def test_the_request_id_is_called_this_projects_addition_not_gclouds() -> None:
    """gcloud sends no `requestId` for a queued-resource create
    (googlecloudsdk `surface/compute/tpus/queued_resources/create.yaml` maps only
    `queuedResourceId`, and no request hook of `command_lib/compute/tpus/queued_resources/
    util.py` sets one): the docs must not credit gcloud with it."""
    create = " ".join(section(read_doc("tpu-request"), "The create").split())
    assert "One addition of this project's: the call carries a `requestId`" in create
    assert "gcloud sends none" in create
    module = (ROOT / "components/vm/queued_resource_create.py").read_text()
    assert "is this project's addition: gcloud sets none" in " ".join(module.split())


@pytest.mark.parametrize(
    ("replay_answer", "answers"),
    [
        ("already_exists", [504, 409]),
        ("operation", [504, 200]),
    ],
)
def test_a_replayed_create_adopts_what_the_lost_answer_created(
    tpu_env: FakeTpuApi, replay_answer: Any, answers: list[int]
) -> None:
    tpu_env.replay_answer = replay_answer
    # The backend commits, the front end answers 504; the library resends the same request.
    tpu_env.fail_next(1, status=504, methods=["queuedResources.create"], take_effect=True)
    result = QueuedResourceProvider().create(props_for("v5e1"))
    outs = outs_of(result)
    assert outs["state"] == "ACTIVE" and outs["zone"] == "us-west4-a"
    creates = tpu_env.requests_for("queuedResources.create")
    assert [r.status for r in creates] == answers
    assert len({r.query["requestId"] for r in creates}) == 1
    assert not tpu_env.requests_for("DELETE")  # adopted, not deleted and not orphaned
    assert tpu_env.state(result.id) == "ACTIVE"


def test_a_queued_resource_left_by_another_run_is_neither_adopted_nor_deleted(
    tpu_env: FakeTpuApi,
) -> None:
    props = props_for("v5e1")
    name = _start_request_directly(tpu_env, props)
    with pytest.raises(Exception, match="already exists, probably left by an interrupted run"):
        QueuedResourceProvider().create(props)
    assert tpu_env.state(name) is not None
    assert not tpu_env.requests_for("DELETE")


@pytest.mark.parametrize("in_operation", [False, True])
def test_a_service_account_not_yet_visible_is_retried_in_the_same_zone(
    tpu_env: FakeTpuApi, in_operation: bool
) -> None:
    tpu_env.reject_service_account(SA_EMAIL, 0.6, in_operation=in_operation)
    outs = outs_of(QueuedResourceProvider().create(props_for("v6e4")))
    assert outs["zone"] == "southamerica-west1-a"  # the first zone, not a failover
    assert outs["zone_errors"] == []
    assert len(creates_in(tpu_env, "southamerica-west1-a")) >= 2
    assert not creates_in(tpu_env, "us-east5-a")


def test_a_service_account_that_never_appears_stops_after_the_bound(tpu_env: FakeTpuApi) -> None:
    tpu_env.reject_service_account(SA_EMAIL, 3600.0)
    props = with_timing(props_for("v6e4"), iam_wait_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        QueuedResourceProvider().create(props)
    assert time.monotonic() - started < 30
    message = str(caught.value)
    assert SA_EMAIL in message and "southamerica-west1-a" in message
    assert "no zone could provide" not in message
    assert not creates_in(tpu_env, "us-east5-a")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"labels": {"stack": "v6e4", "Owner": "x"}}, 'tpu.nodeSpec[0].node.labels["Owner"]'),
        ({"runtime_version": "v2-alpha-tpuv5-lite"}, "tpu.nodeSpec[0].node.runtimeVersion"),
    ],
)
def test_a_bad_body_stops_at_once_naming_the_field(
    tpu_env: FakeTpuApi, change: dict[str, Any], field: str
) -> None:
    props = {**props_for("v6e4"), **change}
    with pytest.raises(Exception) as caught:
        QueuedResourceProvider().create(props)
    message = str(caught.value)
    assert field in message
    assert "no zone could provide" not in message
    assert "not a capacity problem" in message
    assert len(tpu_env.requests_for("queuedResources.create")) == 1  # no other zone tried


@pytest.mark.parametrize(
    ("status", "message", "failed", "verdict"),
    [
        ("INVALID_ARGUMENT", f"Service account {SA_EMAIL} does not exist.", False, "iam"),
        ("PERMISSION_DENIED", f"The caller cannot act as {SA_EMAIL}", False, "iam"),
        ("INVALID_ARGUMENT", REJECTION, False, "zone"),
        ("INVALID_ARGUMENT", UNAVAILABLE_V6E, False, "zone"),
        ("RESOURCE_EXHAUSTED", "Quota TPUV6E exceeded", False, "zone"),
        ("DEADLINE_EXCEEDED", "validUntilDuration (1800s) expired", True, "zone"),
        ("INTERNAL", "no capacity", True, "zone"),
        (
            "INVALID_ARGUMENT",
            'Runtime version "x" is not supported for accelerator type "v6e-4"',
            False,
            "stop",
        ),
        (
            "INVALID_ARGUMENT",
            "Invalid value at 'queued_resource.tpu.node_spec[0].node.service_account.scope[0]'",
            False,
            "stop",
        ),
        ("FAILED_PRECONDITION", "The TPU API is disabled", False, "stop"),
        ("PERMISSION_DENIED", "Permission tpu.queuedResources.create denied", False, "stop"),
    ],
)
def test_refusals_are_classified_narrowly(
    status: str, message: str, failed: bool, verdict: str
) -> None:
    from components.vm.queued_resource_create import _RefusedError, _verdict
    from components.vm.tpu_api import ApiError

    spec = Spec.from_props(props_for("v6e4"))
    refusal = _RefusedError(ApiError(400, status, message), failed=failed)
    assert _verdict(refusal, spec) == verdict


@pytest.mark.parametrize(
    ("http_status", "name"), [(409, "ABORTED"), (400, "INVALID_ARGUMENT"), (500, "INTERNAL")]
)
def test_delete_is_retried_whatever_the_code_while_provisioning(
    tpu_env: FakeTpuApi, http_status: int, name: str
) -> None:
    tpu_env.delete_refusal = (http_status, name)
    # PROVISIONING lasts until the fake has refused a delete and the provider has read the
    # state back, however slow the machine is (a fixed duration raced the client's start under
    # a parallel run); then it ends, and the retried delete goes through.
    tpu_env.durations = StateDurations(0.05, 0.05, 0.05, provisioning=3600)
    props = props_for("v5e1")
    qr_name = _start_request_directly(tpu_env, props)
    assert tpu_env.wait_for_state(qr_name, "PROVISIONING", timeout=5)

    def end_provisioning_once_refused() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = list(tpu_env.requests)
            refused_at = [i for i, r in enumerate(seen) if r.status == http_status]
            if refused_at and any(r.method == "GET" for r in seen[refused_at[0] + 1 :]):
                break
            time.sleep(0.02)
        tpu_env.durations = StateDurations(0.05, 0.05, 0.05, provisioning=0.05)

    releaser = threading.Thread(target=end_provisioning_once_refused, daemon=True)
    releaser.start()
    QueuedResourceProvider().delete(qr_name, props)
    releaser.join(timeout=60)
    refused = [r for r in tpu_env.requests_for("DELETE") if r.status == http_status]
    assert refused, "the fake should have refused the delete while PROVISIONING"
    assert tpu_env.state(qr_name) is None


def test_delete_is_retried_while_creating(tpu_env: FakeTpuApi) -> None:
    tpu_env.delete_refusal = (409, "ABORTED")
    tpu_env.undeletable_states = frozenset({"CREATING"})
    tpu_env.durations = StateDurations(creating=2.0)
    props = props_for("v5e1")
    qr_name = _start_request_directly(tpu_env, props)
    QueuedResourceProvider().delete(qr_name, props)
    assert any(r.status == 409 for r in tpu_env.requests_for("DELETE"))
    assert tpu_env.state(qr_name) is None


def _bounded(call: Callable[[], None], seconds: float = 60.0) -> None:
    """Run `call` in a thread; fail (instead of hanging the suite) if it has not ended after
    `seconds`, far beyond what it needs: a retry loop that never ends is the bug looked for."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - handed to the test below
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds:.0f} s: the delete loops")
    if errors:
        raise errors[0]


def test_a_delete_refused_in_another_state_is_raised_not_waited_out(tpu_env: FakeTpuApi) -> None:
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    tpu_env.delete_refusal = (409, "ABORTED")
    tpu_env.undeletable_states = frozenset({"ACTIVE"})
    started = time.monotonic()
    with pytest.raises(Exception, match=r"could not be deleted: ABORTED .*it is ACTIVE"):
        _bounded(lambda: provider.delete(created.id, {**props, **outs_of(created)}))
    assert time.monotonic() - started < 5
    # Tried once more at once (the state may have changed since the refusal), then raised.
    assert [r.status for r in tpu_env.requests_for("DELETE")] == [409, 409]


def test_a_delete_whose_operation_ends_with_an_error_is_reported_with_that_error(
    tpu_env: FakeTpuApi,
) -> None:
    """`queuedResources.delete` answers an Operation; when it ends with an error the queued
    resource stays ACTIVE. The delete reads the Operation and reports its error at once (after
    one more try, as for any refusal in a deletable state), not "still ACTIVE" at the timeout
    with no reason."""
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    created = provider.create(props)
    tpu_env.delete_refusal_in_operation = True
    tpu_env.undeletable_states = frozenset({"ACTIVE"})
    with pytest.raises(Exception, match="could not be deleted: FAILED_PRECONDITION") as caught:
        _bounded(lambda: provider.delete(created.id, {**props, **outs_of(created)}))
    message = str(caught.value)
    assert "FAILED_PRECONDITION (in the operation): Cannot delete queued resource" in message
    assert "(it is ACTIVE)" in message and "still ACTIVE" not in message
    assert [r.status for r in tpu_env.requests_for("DELETE")] == [200, 200]
    assert any("/operations/" in r.path for r in tpu_env.requests_for("GET"))
    assert tpu_env.state(created.id) == "ACTIVE"


def test_a_delete_refused_by_its_operation_while_provisioning_is_retried_until_allowed(
    tpu_env: FakeTpuApi,
) -> None:
    """An Operation error takes the refusal path: while PROVISIONING it is retried with backoff,
    and once the node is ACTIVE the delete goes through and it is gone."""
    tpu_env.durations = StateDurations(0.05, 0.05, 0.05, provisioning=2.0, deleting=0.05)
    tpu_env.delete_refusal_in_operation = True
    props = props_for("v5e1")
    name = _start_request_directly(tpu_env, props)
    assert tpu_env.wait_for_state(name, "PROVISIONING", timeout=5)
    _bounded(lambda: QueuedResourceProvider().delete(name, props))
    assert len(tpu_env.requests_for("DELETE")) >= 2
    assert tpu_env.state(name) is None


def test_a_delete_refused_while_provisioning_that_reads_active_after_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refusal and the state read after it are two requests, and the node can turn ACTIVE
    in between: the delete is then tried again, not reported as impossible (a race seen under
    load in the full suite). On a manual clock, PROVISIONING ends exactly between the two."""
    with FakeTpuApi(clock=ManualClock()) as fake:
        monkeypatch.setenv("TPU_API_ENDPOINT", fake.base_url)
        monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", fake.token)
        fake.durations = StateDurations(1.0, 1.0, 1.0, provisioning=60.0)
        props = props_for("v5e1")
        name = _start_request_directly(fake, props)
        fake.advance(3.5)
        assert fake.state(name) == "PROVISIONING"
        original = queued_resource_delete._state_or_gone

        def provisioning_ends_meanwhile(api: Any, qr_name: str) -> str:
            if fake.requests_for("DELETE"):  # after the refusal, before the read-back
                fake.advance(120.0)
            return original(api, qr_name)

        monkeypatch.setattr(queued_resource_delete, "_state_or_gone", provisioning_ends_meanwhile)
        _bounded(lambda: QueuedResourceProvider().delete(name, props))
        assert [r.status for r in fake.requests_for("DELETE")] == [400, 200]
        assert fake.state(name) is None


def test_expires_at_falls_back_to_the_nodes_termination_timestamp(tpu_env: FakeTpuApi) -> None:
    tpu_env.qr_reports_termination_time = False
    outs = outs_of(QueuedResourceProvider().create(props_for("v5e1")))
    node = (
        tpu_env.discovery_client()
        .projects()
        .locations()
        .nodes()
        .get(name=outs["node_name"])
        .execute()
    )
    assert outs["termination_time"] == node["schedulingConfig"]["terminationTimestamp"]
    assert outs["termination_time"]


def test_retries_come_from_the_library(
    tpu_env: FakeTpuApi, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """429/5xx are retried by googleapiclient's `execute(num_retries=N)`. With its
    retry decision switched off, a 503 is final; a hand-written loop would hide that."""
    tpu_env.fail_next(1, status=503, methods=["queuedResources.create"])
    assert outs_of(QueuedResourceProvider().create(props_for("v5e1")))["state"] == "ACTIVE"
    assert "retry 1 of 3" in capsys.readouterr().err  # each retry is reported
    provider = QueuedResourceProvider()
    props = props_for("v5e1")
    props["qr_id"], props["node_id"] = "tpu-vllm-other", "tpu-vllm-other-node"
    import googleapiclient.http

    monkeypatch.setattr(googleapiclient.http, "_should_retry_response", lambda *_: False)
    tpu_env.fail_next(1, status=503, methods=["queuedResources.create"])
    with pytest.raises(Exception, match="UNAVAILABLE"):
        provider.create(props)


@pytest.mark.parametrize("method", ["operations.get", "queuedResources.get", "nodes.get"])
def test_an_unexpected_error_after_the_create_still_deletes_it(
    tpu_env: FakeTpuApi, method: str
) -> None:
    tpu_env.durations = StateDurations(creating=0.2)
    tpu_env.fail_next(1, status=403, methods=[method], message="Permission denied on resource")
    props = props_for("v5e1")
    props["zones"] = ["us-west4-a", "us-east5-a"]
    with pytest.raises(Exception, match="PERMISSION_DENIED"):
        QueuedResourceProvider().create(props)
    assert left_in(tpu_env, "us-west4-a") is None
    assert any(r.status == 200 for r in tpu_env.requests_for("DELETE"))
    assert not creates_in(tpu_env, "us-east5-a")


class ScriptedTpuApi:
    """The three TPU API calls the delete makes, answering a script: the states successive reads
    find ("GONE": 404), and whether each DELETE is refused as another delete is under way."""

    def __init__(
        self,
        states: list[str],
        *,
        refuse_deletes: int,
        after_delete: list[str],
        refusal: int = 400,
        operations: list[list[dict[str, object]]] | None = None,
    ) -> None:
        self.states = states
        self.refuse_deletes = refuse_deletes
        self.after_delete = after_delete
        #: The refused DELETEs' status; for each accepted one in turn, its Operation's reads
        #: (the last one stays); without any, the Operation is done at once.
        self.refusal = refusal
        self.scripts = list(operations or [])
        self.operations: list[dict[str, object]] = []
        self.operation_reads = 0
        self.deletes = 0
        self.reads: list[str] = []

    def delete_queued_resource(self, name: str) -> dict[str, object]:
        from components.vm.tpu_api import ApiError

        self.deletes += 1
        if self.deletes <= self.refuse_deletes:
            reasons = {400: "FAILED_PRECONDITION", 409: "FAILED_PRECONDITION", 404: "NOT_FOUND"}
            reason = reasons.get(self.refusal, "PERMISSION_DENIED")
            raise ApiError(self.refusal, reason, "refused")
        self.states = list(self.after_delete)
        self.operations = self.scripts.pop(0) if self.scripts else []
        return {"name": f"{name}/operations/op-{self.deletes}", "done": not self.operations}

    def get_queued_resource(self, name: str) -> dict[str, object]:
        from components.vm.tpu_api import ApiError

        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        self.reads.append(state)
        if state == "GONE":
            raise ApiError(404, "NOT_FOUND", "gone")
        return {"state": {"state": state}}

    def get_operation(self, name: str) -> dict[str, object]:
        self.operation_reads += 1
        found = self.operations.pop(0) if len(self.operations) > 1 else self.operations[0]
        return {"name": name, **found}


def delete_and_wait(api: ScriptedTpuApi, *, just_created: bool = False, **timing: float) -> None:
    from components.vm import queued_resource_delete
    from components.vm.queued_resource_spec import Timing

    values = {"poll_seconds": 0.01, "delete_timeout_seconds": 5.0, **timing}
    queued_resource_delete.delete_and_wait(
        api,  # type: ignore[arg-type]
        "qr-1",
        Timing(**values),  # type: ignore[arg-type]
        just_created=just_created,
    )


@pytest.mark.parametrize(("just_created", "deletes"), [(True, 2), (False, 1)])
def test_a_404_delete_of_a_resource_just_created_is_sent_again(
    just_created: bool, deletes: int
) -> None:
    """The cleanup of this run's own create: its DELETE may itself answer 404 only because the
    new resource is not visible yet. Within the grace it is sent
    again, and the second, accepted, deletes it; any other delete takes a 404 as gone."""
    api = ScriptedTpuApi(["GONE"], refuse_deletes=1, after_delete=["DELETING", "GONE"], refusal=404)
    delete_and_wait(api, just_created=just_created)
    assert api.deletes == deletes, api.reads


def test_another_clients_failed_delete_is_followed_by_ours_not_waited_out() -> None:
    """Our delete is refused because another client's is under way (the node reads DELETING);
    that one fails and the node goes back to ACTIVE. Ours is sent again at once instead of
    polling the node, ACTIVE, until the 30-minute bound says "still ACTIVE"."""
    api = ScriptedTpuApi(
        ["DELETING", "DELETING", "ACTIVE", "ACTIVE"],
        refuse_deletes=1,
        after_delete=["DELETING", "GONE"],
    )
    delete_and_wait(api)
    assert api.deletes == 2


def test_a_delete_that_meets_another_clients_delete_returns_only_once_it_is_gone() -> None:
    """Our delete is refused because another client's is under way (the node reads DELETING).
    `pulumi destroy` must not report success while the TPU still exists and bills: the delete
    returns only after a read says the queued resource is gone."""
    api = ScriptedTpuApi(["DELETING"] * 5 + ["GONE"], refuse_deletes=1, after_delete=[])
    delete_and_wait(api)
    assert api.reads[-1] == "GONE" and api.reads.count("DELETING") == 5, api.reads
    assert api.deletes == 1  # the other client's delete was waited for, not ours sent again


def test_a_refused_delete_whose_read_back_is_404_is_sent_again_not_taken_as_gone() -> None:
    """A cleanup right after a create: the DELETE is refused (the queued resource is still
    PROVISIONING), and the read after it answers 404 only because a new resource is not yet
    visible to reads. The refusal proves it exists: the delete is sent again, and returns only
    once it was accepted and the resource is gone."""
    api = ScriptedTpuApi(["GONE"], refuse_deletes=1, after_delete=["DELETING", "GONE"])
    delete_and_wait(api)
    assert api.deletes == 2, api.reads
    assert api.reads[-2:] == ["DELETING", "GONE"], api.reads


def test_a_404_during_our_own_unfinished_delete_waits_for_its_operation() -> None:
    """Our DELETE is accepted, but reads cannot see the resource yet (404) while the
    Operation runs; it then fails. Its end decides, not the read: the failure is a refusal,
    and the delete is sent again."""
    failed = {"done": True, "error": {"code": 9, "message": "still provisioning"}}
    api = ScriptedTpuApi(
        ["GONE"],
        refuse_deletes=0,
        after_delete=["GONE"],
        operations=[[{"done": False}, {"done": False}, failed], [{"done": True}]],
    )
    delete_and_wait(api)
    assert api.operation_reads >= 3 and api.deletes == 2, (api.operation_reads, api.deletes)


def test_a_refusal_that_says_nothing_of_existence_gets_no_grace() -> None:
    """A 403 comes whether or not the resource exists (AIP-211): with a 404 read after it, the
    resource is gone at once, the delete not sent again."""
    api = ScriptedTpuApi(["GONE"], refuse_deletes=1, after_delete=[], refusal=403)
    delete_and_wait(api)
    assert api.deletes == 1


def test_the_grace_never_outlasts_the_delete_deadline() -> None:
    """A grace longer than the delete's own bound ends with the bound, without a flood of
    DELETEs: refused (the API says it exists) and read 404 every time, it is let go."""
    api = ScriptedTpuApi(["GONE"], refuse_deletes=10_000, after_delete=[])
    began = time.monotonic()
    delete_and_wait(api, consistency_grace_seconds=60.0, delete_timeout_seconds=0.3)
    assert time.monotonic() - began < 5 and api.deletes < 60, api.deletes
