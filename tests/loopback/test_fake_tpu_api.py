"""Tests of the TPU v2alpha1 fake itself, driven through the real discovery client.

Why: the provider tests trust this fake to reject what Google rejects and to walk the states
Google walks. If the fake were lenient, a broken request body would pass every test and fail
only against the real API, so each rule the fake claims is pinned here.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from googleapiclient import discovery
from googleapiclient.errors import HttpError
from googleapiclient.http import build_http

from tests.support.fakes.tpu_api import (
    DEFAULT_HOST_KEY,
    FakeTpuApi,
    ManualClock,
    StateDurations,
)
from tests.support.tpu_client import NODE_ID, PARENT, PROJECT, ZONE, api, product_body

QR_ID = "vllm-qr"
QR_NAME = f"{PARENT}/queuedResources/{QR_ID}"
NODE_NAME = f"{PARENT}/nodes/{NODE_ID}"
SSH_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3Qta2V5LWZyb20tYS1yZWFsLXNzaGQtaG9zdA=="
FAST = StateDurations(0.05, 0.05, 0.05, 0.05, 0.05, 0.05)


@pytest.fixture
def fast_fake(fake_tpu: FakeTpuApi) -> FakeTpuApi:
    """The shared fixture with shorter state durations."""
    fake_tpu.durations = FAST
    return fake_tpu


@pytest.fixture
def manual() -> Iterator[FakeTpuApi]:
    """A fake on a manual clock: states change only when the test advances time."""
    with FakeTpuApi(clock=ManualClock()) as fake:
        yield fake


def create(fake: FakeTpuApi, body: dict[str, Any] | None = None, **kw: str) -> dict[str, Any]:
    """Create a queued resource (the product's body unless given)."""
    result: dict[str, Any] = (
        api(fake)
        .projects()
        .locations()
        .queuedResources()
        .create(
            parent=kw.get("parent", PARENT),
            queuedResourceId=kw.get("qr_id", QR_ID),
            body=product_body() if body is None else body,
        )
        .execute()
    )
    return result


def get_qr(fake: FakeTpuApi, name: str = QR_NAME) -> dict[str, Any]:
    result: dict[str, Any] = (
        api(fake).projects().locations().queuedResources().get(name=name).execute()
    )
    return result


def get_node(fake: FakeTpuApi, name: str = NODE_NAME) -> dict[str, Any]:
    result: dict[str, Any] = api(fake).projects().locations().nodes().get(name=name).execute()
    return result


def host_keys(fake: FakeTpuApi) -> dict[str, Any]:
    result: dict[str, Any] = (
        api(fake)
        .projects()
        .locations()
        .nodes()
        .getGuestAttributes(name=NODE_NAME, body={"queryPath": "hostkeys/"})
        .execute()
    )
    return result


def error_of(call: Callable[[], object]) -> tuple[int, dict[str, Any]]:
    """Run ``call``, expect an HttpError, return (HTTP status, the ``error`` object)."""
    with pytest.raises(HttpError) as info:
        call()
    payload = json.loads(info.value.content)
    return info.value.status_code, payload["error"]


def raw_get(fake: FakeTpuApi, path: str, token: str) -> tuple[int, dict[str, Any]]:
    """GET without the discovery client, for requests it would never send."""
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def violations(error: dict[str, Any]) -> dict[str, str]:
    (detail,) = [d for d in error["details"] if d["@type"].endswith("google.rpc.BadRequest")]
    return {v["field"]: v["description"] for v in detail["fieldViolations"]}


def poll(fn: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_happy_path_reaches_active_with_ips(fast_fake: FakeTpuApi) -> None:
    op = create(fast_fake)
    assert op["done"] is False
    assert op["name"].startswith(f"{PARENT}/operations/operation-")
    assert op["metadata"]["target"] == QR_NAME

    ops = api(fast_fake).projects().locations().operations()
    finished = poll(lambda: ops.get(name=op["name"]).execute(), lambda o: o["done"])
    assert finished["done"] is True
    assert finished["response"]["name"] == QR_NAME

    qr = poll(lambda: get_qr(fast_fake), lambda q: q["state"]["state"] == "ACTIVE")
    assert qr["state"]["state"] == "ACTIVE"
    assert qr["provisioningModel"] == "FLEX_START"
    assert qr["runDuration"]["maxRunDuration"] == "14400s"
    assert qr["runDuration"]["terminationTime"].endswith("Z")
    assert qr["tpu"]["nodeSpec"][0]["nodeId"] == NODE_ID

    node = get_node(fast_fake)
    assert node["state"] == "READY"
    assert node["acceleratorType"] == "v5litepod-1"
    (endpoint,) = node["networkEndpoints"]
    assert endpoint["ipAddress"].startswith("10.128.0.")
    assert endpoint["port"] == 8470
    assert endpoint["accessConfig"]["externalIp"].startswith("203.0.113.")

    created = fast_fake.requests_for("queuedResources.create")[0]
    assert created.path == f"/v2alpha1/{PARENT}/queuedResources"
    assert created.query["queuedResourceId"] == QR_ID
    assert created.headers["authorization"] == "Bearer test-token"
    assert created.body == product_body()


def test_states_walk_in_order_on_manual_clock(manual: FakeTpuApi) -> None:
    create(manual)
    seen = [get_qr(manual)["state"]["state"]]
    for _ in range(4):
        manual.advance(0.2)
        seen.append(get_qr(manual)["state"]["state"])
    assert seen == ["CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    created = get_qr(manual)["createTime"]
    termination = get_qr(manual)["runDuration"]["terminationTime"]
    assert termination > created


def test_node_has_no_external_ip_unless_requested(manual: FakeTpuApi) -> None:
    body = product_body()
    del body["tpu"]["nodeSpec"][0]["node"]["networkConfig"]
    create(manual, body)
    manual.advance(1.0)
    (endpoint,) = get_node(manual)["networkEndpoints"]
    assert "accessConfig" not in endpoint


def test_product_body_validates_and_is_echoed(manual: FakeTpuApi) -> None:
    create(manual)
    manual.advance(1.0)
    node = get_node(manual)
    sent = product_body()["tpu"]["nodeSpec"][0]["node"]
    for key in ("serviceAccount", "metadata", "labels", "tags", "networkConfig"):
        assert node[key] == sent[key]
    assert get_qr(manual)["queueingPolicy"] == {"validUntilDuration": "3600s"}


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (
            lambda b: b["tpu"]["nodeSpec"][0]["node"].update(fooBar=1),
            "tpu.nodeSpec[0].node.fooBar",
            'Unknown name "fooBar"',
        ),
        (
            lambda b: b["tpu"]["nodeSpec"][0]["node"]["networkConfig"].update(
                enableExternalIps="yes"
            ),
            "tpu.nodeSpec[0].node.networkConfig.enableExternalIps",
            "TYPE_BOOL",
        ),
        (
            lambda b: b.update(provisioningModel="FLEX"),
            "provisioningModel",
            "ProvisioningModel",
        ),
        (
            lambda b: b["runDuration"].update(maxRunDuration="4h"),
            "runDuration.maxRunDuration",
            "Illegal duration format",
        ),
        (
            lambda b: b["tpu"]["nodeSpec"][0]["node"].update(tags="vllm"),
            "tpu.nodeSpec[0].node.tags",
            "Invalid value",
        ),
    ],
    ids=["unknown-field", "wrong-type", "bad-enum", "bad-duration", "not-an-array"],
)
def test_schema_violations_are_400_naming_the_field(
    fast_fake: FakeTpuApi, mutate: Callable[[dict[str, Any]], None], field: str, words: str
) -> None:
    body = product_body()
    mutate(body)
    status, error = error_of(lambda: create(fast_fake, body))
    assert status == 400
    assert error["status"] == "INVALID_ARGUMENT"
    assert field in violations(error)
    assert words in violations(error)[field]
    assert fast_fake.state(QR_ID) is None


def test_output_only_fields_are_ignored_and_aliases_accepted(manual: FakeTpuApi) -> None:
    body = product_body()
    body["state"] = {"state": "ACTIVE"}
    body["name"] = "projects/x/locations/y/queuedResources/z"
    body["run_duration"] = body.pop("runDuration")
    create(manual, body)
    qr = get_qr(manual)
    assert qr["name"] == QR_NAME
    assert qr["state"]["state"] == "CREATING"
    assert qr["runDuration"]["maxRunDuration"] == "14400s"


def test_oneof_and_unknown_query_parameter_rejected(fast_fake: FakeTpuApi) -> None:
    body = product_body()
    body["queueingPolicy"]["validAfterDuration"] = "60s"
    status, error = error_of(lambda: create(fast_fake, body))
    assert status == 400
    assert "queueingPolicy.validAfterDuration" in violations(error)

    status, payload = raw_get(fast_fake, f"/v2alpha1/{QR_NAME}?bogus=1", "test-token")
    assert status == 400
    assert "bogus" in payload["error"]["message"]


def test_missing_or_wrong_bearer_is_401(fast_fake: FakeTpuApi) -> None:
    anonymous = discovery.build(
        "tpu",
        "v2alpha1",
        static_discovery=True,
        http=build_http(),
        client_options={"api_endpoint": fast_fake.base_url},
    )
    status, error = error_of(
        lambda: anonymous.projects().locations().queuedResources().get(name=QR_NAME).execute()
    )
    assert (status, error["status"], error["code"]) == (401, "UNAUTHENTICATED", 401)
    assert "missing required authentication credential" in error["message"]

    status, payload = raw_get(fast_fake, f"/v2alpha1/{QR_NAME}", "nope")
    assert status == 401
    assert "invalid authentication credentials" in payload["error"]["message"]
    assert fast_fake.requests[-1].status == 401


def node_of(body: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = body["tpu"]["nodeSpec"][0]["node"]
    return node


SEMANTIC_CASES: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "flex-no-duration": (lambda b: b.pop("runDuration"), "runDuration.maxRunDuration"),
    "flex-over-7-days": (
        lambda b: b.update(runDuration={"maxRunDuration": "604801s"}),
        "runDuration.maxRunDuration",
    ),
    "flex-and-spot": (lambda b: b.update(spot={}), "spot"),
    "parent": (
        lambda b: b["tpu"]["nodeSpec"][0].update(parent="projects/proj/locations/x"),
        "tpu.nodeSpec[0].parent",
    ),
    "v5e-spelling": (
        lambda b: node_of(b).update(acceleratorType="v5e-1"),
        "tpu.nodeSpec[0].node.acceleratorType",
    ),
    "no-runtime": (
        lambda b: node_of(b).pop("runtimeVersion"),
        "tpu.nodeSpec[0].node.runtimeVersion",
    ),
    "label": (
        lambda b: node_of(b).update(labels={"App": "x"}),
        'tpu.nodeSpec[0].node.labels["App"]',
    ),
}


@pytest.mark.parametrize(
    ("mutate", "field"), list(SEMANTIC_CASES.values()), ids=list(SEMANTIC_CASES)
)
def test_semantic_checks(
    fast_fake: FakeTpuApi, mutate: Callable[[dict[str, Any]], object], field: str
) -> None:
    body = product_body()
    mutate(body)
    status, error = error_of(lambda: create(fast_fake, body))
    assert (status, error["status"]) == (400, "INVALID_ARGUMENT")
    assert field in violations(error)


def test_flex_start_expiry_suspends_and_deletes_node(fast_fake: FakeTpuApi) -> None:
    fast_fake.seconds_per_run_second = 0.002  # maxRunDuration 100s -> 0.2 s
    body = product_body()
    body["runDuration"]["maxRunDuration"] = "100s"
    create(fast_fake, body)
    fast_fake.wait_for_state(QR_ID, "ACTIVE")
    assert get_node(fast_fake)["state"] == "READY"
    fast_fake.wait_for_state(QR_ID, "SUSPENDED")
    qr = get_qr(fast_fake)
    assert qr["state"] == {"state": "SUSPENDED", "stateInitiator": "SERVICE"}
    status, error = error_of(lambda: get_node(fast_fake))
    assert (status, error["status"]) == (404, "NOT_FOUND")


def test_expire_now_deletes_the_node_at_once(manual: FakeTpuApi) -> None:
    """Cloud TPU flex-start docs: when the run duration elapses the TPU VM is deleted and the
    queued resource moves to SUSPENDED. The node is gone (404), not DELETING, from the moment
    the run ends, through SUSPENDING and after."""
    create(manual)
    manual.advance(1.0)
    assert get_node(manual)["state"] == "READY"
    manual.expire(QR_ID)
    assert get_qr(manual)["state"] == {"state": "SUSPENDING", "stateInitiator": "SERVICE"}
    status, error = error_of(lambda: get_node(manual))
    assert (status, error["status"]) == (404, "NOT_FOUND")
    assert NODE_NAME in error["message"]
    attributes = (
        api(manual)
        .projects()
        .locations()
        .nodes()
        .getGuestAttributes(name=NODE_NAME, body={"queryPath": "hostkeys/"})
    )
    assert error_of(attributes.execute)[0] == 404
    manual.advance(0.2)
    assert get_qr(manual)["state"]["state"] == "SUSPENDED"
    assert error_of(lambda: get_node(manual))[0] == 404


def test_force_delete_while_active(manual: FakeTpuApi) -> None:
    create(manual)
    manual.advance(1.0)
    qrs = api(manual).projects().locations().queuedResources()
    status, error = error_of(lambda: qrs.delete(name=QR_NAME).execute())
    assert (status, error["status"]) == (400, "FAILED_PRECONDITION")
    assert "force=true" in error["message"]

    op = qrs.delete(name=QR_NAME, force=True).execute()
    assert op["done"] is False
    assert manual.requests[-1].query["force"] == "true"
    assert get_qr(manual)["state"] == {"state": "DELETING", "stateInitiator": "USER"}
    assert get_node(manual)["state"] == "DELETING"
    manual.advance(0.2)
    assert error_of(lambda: get_qr(manual))[0] == 404
    assert error_of(lambda: get_node(manual))[0] == 404
    done = api(manual).projects().locations().operations().get(name=op["name"]).execute()
    assert done["done"] is True
    assert done["response"]["@type"] == "type.googleapis.com/google.protobuf.Empty"


def test_delete_during_provisioning_is_failed_precondition(manual: FakeTpuApi) -> None:
    create(manual)
    manual.advance(0.6)
    assert get_qr(manual)["state"]["state"] == "PROVISIONING"
    qrs = api(manual).projects().locations().queuedResources()
    status, error = error_of(lambda: qrs.delete(name=QR_NAME, force=True).execute())
    assert (status, error["status"]) == (400, "FAILED_PRECONDITION")
    assert "PROVISIONING" in error["message"]


def test_zone_rejects_flex_start(fast_fake: FakeTpuApi) -> None:
    text = 'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1"'
    fast_fake.set_zone("europe-west4-a", "reject_invalid_argument", text)
    parent = f"projects/{PROJECT}/locations/europe-west4-a"
    status, error = error_of(lambda: create(fast_fake, product_body(parent), parent=parent))
    assert (status, error["status"], error["message"]) == (400, "INVALID_ARGUMENT", text)


def test_zone_quota_failure_and_dws_expiry(fast_fake: FakeTpuApi) -> None:
    fast_fake.set_zone("z-quota", "resource_exhausted")
    parent = f"projects/{PROJECT}/locations/z-quota"
    status, error = error_of(lambda: create(fast_fake, product_body(parent), parent=parent))
    assert (status, error["status"]) == (429, "RESOURCE_EXHAUSTED")

    fast_fake.set_zone("z-fail", "fail", "no capacity here")
    parent = f"projects/{PROJECT}/locations/z-fail"
    create(fast_fake, product_body(parent), parent=parent)
    fast_fake.wait_for_state(f"{parent}/queuedResources/{QR_ID}", "FAILED")
    failed = get_qr(fast_fake, f"{parent}/queuedResources/{QR_ID}")["state"]
    assert failed["failedData"]["error"] == {"code": 8, "message": "no capacity here"}

    fast_fake.set_zone("z-none", "never_capacity")
    fast_fake.seconds_per_run_second = 0.0001  # validUntilDuration 3600s -> 0.36 s
    parent = f"projects/{PROJECT}/locations/z-none"
    create(fast_fake, product_body(parent), parent=parent)
    name = f"{parent}/queuedResources/{QR_ID}"
    fast_fake.wait_for_state(name, "WAITING_FOR_RESOURCES")
    fast_fake.wait_for_state(name, "FAILED")
    assert (
        "validUntilDuration" in get_qr(fast_fake, name)["state"]["failedData"]["error"]["message"]
    )


def test_fail_next_503_then_retry_succeeds(fast_fake: FakeTpuApi) -> None:
    create(fast_fake)
    fast_fake.fail_next(2, status=503, methods=["queuedResources.get"])
    status, error = error_of(lambda: get_qr(fast_fake))
    assert (status, error["status"]) == (503, "UNAVAILABLE")

    request = api(fast_fake).projects().locations().queuedResources().get(name=QR_NAME)
    request._sleep = lambda _seconds: None
    assert request.execute(num_retries=2)["name"] == QR_NAME
    assert [r.status for r in fast_fake.requests_for("queuedResources.get")] == [503, 503, 200]


def test_duplicate_is_409_and_unknown_is_404(fast_fake: FakeTpuApi) -> None:
    create(fast_fake)
    status, error = error_of(lambda: create(fast_fake))
    assert (status, error["status"]) == (409, "ALREADY_EXISTS")
    status, error = error_of(lambda: get_qr(fast_fake, f"{PARENT}/queuedResources/nope"))
    assert (status, error["status"]) == (404, "NOT_FOUND")
    listed = api(fast_fake).projects().locations().queuedResources().list(parent=PARENT).execute()
    assert [q["name"] for q in listed["queuedResources"]] == [QR_NAME]


def test_host_key_present(manual: FakeTpuApi) -> None:
    manual.host_keys = {"ssh-ed25519": SSH_KEY}
    create(manual)
    manual.advance(0.6)
    assert host_keys(manual) == {}  # PROVISIONING: not booted yet
    manual.advance(0.2)
    (attrs,) = host_keys(manual)["guestAttributes"]
    assert attrs["queryPath"] == "hostkeys/"
    assert attrs["queryValue"]["items"] == [
        {"namespace": "hostkeys", "key": "ssh-ed25519", "value": SSH_KEY}
    ]


def test_host_key_late(manual: FakeTpuApi) -> None:
    manual.host_key_mode = "late"
    manual.host_key_delay = 5.0
    create(manual)
    manual.advance(0.8)
    assert get_qr(manual)["state"]["state"] == "ACTIVE"
    assert host_keys(manual) == {}
    manual.advance(5.0)
    items = host_keys(manual)["guestAttributes"][0]["queryValue"]["items"]
    assert items[0]["value"] == DEFAULT_HOST_KEY


def test_host_key_absent_or_guest_attributes_disabled(manual: FakeTpuApi) -> None:
    manual.host_key_mode = "absent"
    create(manual)
    manual.advance(10.0)
    assert host_keys(manual) == {}

    manual.host_key_mode = "present"
    body = product_body(node_id="other-node")
    del body["tpu"]["nodeSpec"][0]["node"]["metadata"]["enable-guest-attributes"]
    create(manual, body, qr_id="other-qr")
    manual.advance(1.0)
    attributes = (
        api(manual)
        .projects()
        .locations()
        .nodes()
        .getGuestAttributes(name=f"{PARENT}/nodes/other-node", body={"queryPath": "hostkeys/"})
        .execute()
    )
    assert attributes == {}


# -- behaviour the provider must survive ------------------------------------------------------


def create_with_request_id(fake: FakeTpuApi, request_id: str, **kw: str) -> dict[str, Any]:
    parent = kw.get("parent", PARENT)
    result: dict[str, Any] = (
        api(fake)
        .projects()
        .locations()
        .queuedResources()
        .create(
            parent=parent,
            queuedResourceId=kw.get("qr_id", QR_ID),
            requestId=request_id,
            body=product_body(parent),
        )
        .execute()
    )
    return result


def get_operation(fake: FakeTpuApi, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api(fake).projects().locations().operations().get(name=name).execute()
    return result


def test_operation_error_mode_ends_the_operation_with_a_status(manual: FakeTpuApi) -> None:
    manual.set_zone(ZONE, "operation_error", "no capacity for v5litepod-1 here")
    op = create(manual)
    assert op["done"] is False and "error" not in op
    assert get_qr(manual)["state"]["state"] == "CREATING"
    manual.advance(0.2)
    finished = get_operation(manual, op["name"])
    assert finished["done"] is True
    assert finished["error"] == {"code": 8, "message": "no capacity for v5litepod-1 here"}
    assert "response" not in finished
    assert error_of(lambda: get_qr(manual))[0] == 404  # the failed request left nothing


def test_replayed_request_id_is_already_exists_or_the_same_operation(manual: FakeTpuApi) -> None:
    first = create_with_request_id(manual, "6f1c7a52-0d7e-4b43-9d55-0c0ad1a4d6a1")
    status, error = error_of(
        lambda: create_with_request_id(manual, "6f1c7a52-0d7e-4b43-9d55-0c0ad1a4d6a1")
    )
    assert (status, error["status"]) == (409, "ALREADY_EXISTS")
    assert QR_NAME in error["message"]
    manual.replay_answer = "operation"  # AIP-155 style
    again = create_with_request_id(manual, "6f1c7a52-0d7e-4b43-9d55-0c0ad1a4d6a1")
    assert again["name"] == first["name"]


def test_fault_that_takes_effect_creates_and_still_answers_the_error(manual: FakeTpuApi) -> None:
    manual.fail_next(1, status=504, methods=["queuedResources.create"], take_effect=True)
    status, error = error_of(lambda: create(manual))
    assert (status, error["status"]) == (504, "DEADLINE_EXCEEDED")
    assert get_qr(manual)["name"] == QR_NAME  # the backend committed it anyway


def test_new_queued_resource_is_invisible_to_reads_for_a_while(manual: FakeTpuApi) -> None:
    manual.visibility_delay = 5.0
    op = create(manual)
    assert error_of(lambda: get_qr(manual))[0] == 404
    listed = api(manual).projects().locations().queuedResources().list(parent=PARENT).execute()
    assert "queuedResources" not in listed
    assert get_operation(manual, op["name"])["name"] == op["name"]  # the operation is there
    manual.advance(5.0)
    assert get_qr(manual)["name"] == QR_NAME


def test_delete_sees_a_queued_resource_that_reads_do_not_yet(manual: FakeTpuApi) -> None:
    manual.visibility_delay = 5.0
    create(manual)
    qrs = api(manual).projects().locations().queuedResources()
    assert qrs.delete(name=QR_NAME, force=True).execute()["done"] is False
    assert manual.state(QR_ID) == "DELETING"


@pytest.mark.parametrize("in_operation", [False, True])
def test_unknown_service_account_is_refused_for_a_while(
    manual: FakeTpuApi, in_operation: bool
) -> None:
    email = "tpu-node@proj.iam.gserviceaccount.com"
    manual.reject_service_account(email, 10.0, in_operation=in_operation)
    if in_operation:
        op = create(manual)
        manual.advance(0.2)
        error = get_operation(manual, op["name"])["error"]
        assert error == {"code": 3, "message": f"Service account {email} does not exist."}
    else:
        status, error = error_of(lambda: create(manual))
        assert (status, error["status"]) == (400, "INVALID_ARGUMENT")
        assert error["message"] == f"Service account {email} does not exist."
        assert "tpu.nodeSpec[0].node.serviceAccount.email" in violations(error)
    manual.advance(10.0)
    create(manual)
    manual.advance(1.0)
    assert get_qr(manual)["state"]["state"] == "ACTIVE"


@pytest.mark.parametrize(("status", "name"), [(409, "ABORTED"), (400, "INVALID_ARGUMENT")])
def test_delete_refusal_code_and_states_are_knobs(
    manual: FakeTpuApi, status: int, name: str
) -> None:
    manual.delete_refusal = (status, name)
    manual.undeletable_states = frozenset({"CREATING", "PROVISIONING"})
    create(manual)
    qrs = api(manual).projects().locations().queuedResources()
    got, error = error_of(lambda: qrs.delete(name=QR_NAME, force=True).execute())
    assert (got, error["status"]) == (status, name)
    assert "CREATING" in error["message"]
    manual.advance(0.4)  # WAITING_FOR_RESOURCES: deletable
    assert qrs.delete(name=QR_NAME, force=True).execute()["done"] is False


def test_termination_time_may_be_missing_on_the_queued_resource(manual: FakeTpuApi) -> None:
    manual.qr_reports_termination_time = False
    create(manual)
    manual.advance(1.0)
    assert "terminationTime" not in get_qr(manual)["runDuration"]
    assert get_node(manual)["schedulingConfig"]["terminationTimestamp"].endswith("Z")


def _first_read_of_each_answer(fake: FakeTpuApi, requests: list[bytes]) -> list[tuple[int, bool]]:
    """Send each request on one kept-alive connection, as httplib2 does, and tell for each
    answer (status, whether the first read once the socket turned readable held it whole).
    Every wait is bounded (5 s), so a fake that stops answering fails here instead of hanging."""
    seen: list[tuple[int, bool]] = []
    with socket.create_connection(("127.0.0.1", fake.port), timeout=5) as sock:
        for request in requests:
            sock.sendall(request)
            readable, _, _ = select.select([sock], [], [], 5)
            assert readable, "no answer within 5 s"
            first = sock.recv(1 << 16)
            head, _, body = first.partition(b"\r\n\r\n")
            fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
            length = int(fields[b"Content-Length"])
            whole = len(body) == length
            while len(body) < length:  # read the rest, so the next answer starts clean
                more = sock.recv(1 << 16)
                assert more, "connection closed mid-answer"
                body += more
            assert fields.get(b"Connection", b"").strip().lower() != b"close"
            seen.append((int(head.split(b" ")[1]), whole))
    return seen


def test_each_answer_on_a_kept_alive_connection_arrives_whole(manual: FakeTpuApi) -> None:
    """The discovery client reuses one HTTP/1.1 connection (httplib2 `Http.connections`). An
    answer written as headers and body apart is held back by Nagle's algorithm until the
    client's delayed ACK, ~40 ms for every call (see `_Handler`); each answer, an error
    (a refused delete, 409) as much as a success, must leave in one piece."""
    manual.delete_refusal = (409, "ABORTED")
    manual.undeletable_states = frozenset({"ACTIVE"})
    create(manual)
    manual.advance(1.0)
    assert get_qr(manual)["state"]["state"] == "ACTIVE"
    auth = f"Authorization: Bearer {manual.token}\r\nHost: 127.0.0.1\r\n"
    delete = f"DELETE /v2alpha1/{QR_NAME}?force=true HTTP/1.1\r\n{auth}Content-Length: 0\r\n\r\n"
    get = f"GET /v2alpha1/{QR_NAME} HTTP/1.1\r\n{auth}\r\n"
    seen = _first_read_of_each_answer(manual, [delete.encode(), get.encode()] * 10)
    assert [status for status, _ in seen] == [409, 200] * 10
    assert [whole for _, whole in seen] == [True] * 20


def test_a_run_can_be_moved_near_its_end(manual: FakeTpuApi) -> None:
    """`end_run_in`: the end time both reads report moves, and the run ends then."""
    create(manual)
    manual.advance(1.0)
    before = get_qr(manual)["runDuration"]["terminationTime"]
    manual.end_run_in(QR_ID, 600)
    after = get_qr(manual)["runDuration"]["terminationTime"]
    assert after < before
    assert get_node(manual)["schedulingConfig"]["terminationTimestamp"] == after
    manual.advance(599)
    assert get_qr(manual)["state"]["state"] == "ACTIVE"
    manual.advance(2)
    assert get_qr(manual)["state"]["state"] in ("SUSPENDING", "SUSPENDED")
