"""A stable name for the VM backend: the A record, the outputs that use it, and bad zones."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi.runtime import mocks

from components.config import ConfigError
from scripts.plan import plan
from scripts.program_runner import GET_MANAGED_ZONE, Call, NewResource, managed_zone_lookup
from tests.support.mock_outputs import EXTERNAL_IP, MANAGED_ZONE, MANAGED_ZONES, cloud_outputs
from tests.support.pulumi_program import InvokeFailure, run_program

RECORD_SET = "gcp:dns/recordSet:RecordSet"
WITH_DNS = {"tpu-vllm:dns.managedZone": MANAGED_ZONE}


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_without_dns_the_endpoint_is_the_ip_and_no_record_exists(stack: str) -> None:
    run = run_program(stack)
    assert run.of_type(RECORD_SET) == []
    assert GET_MANAGED_ZONE not in [token for token, _ in run.calls]
    assert run.outputs["endpoint"] == f"http://{EXTERNAL_IP}:8000"
    assert run.outputs["endpoint_ip"] == run.outputs["endpoint"]
    assert run.outputs["openai_base_url"] == f"http://{EXTERNAL_IP}:8000/v1"


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_dns_name_points_an_a_record_with_ttl_60_at_the_node(stack: str) -> None:
    run = run_program(stack, WITH_DNS)
    record = run.one(RECORD_SET)
    assert record.inputs["name"] == f"{stack}.models.example.com."
    assert record.inputs["type"] == "A"
    assert record.inputs["ttl"] == 60
    assert record.inputs["rrdatas"] == [EXTERNAL_IP]
    assert record.inputs["managedZone"] == MANAGED_ZONE
    assert record.inputs["project"] == "test-project"
    assert "EndpointName" in run.urn_of(record.name)  # a child of its component
    lookups = [args for token, args in run.calls if token == GET_MANAGED_ZONE]
    assert lookups == [{"name": MANAGED_ZONE, "project": "test-project"}]


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_endpoint_and_base_url_use_the_name_and_endpoint_ip_keeps_the_address(stack: str) -> None:
    run = run_program(stack, WITH_DNS)
    assert run.outputs["endpoint"] == f"http://{stack}.models.example.com:8000"
    assert run.outputs["openai_base_url"] == f"http://{stack}.models.example.com:8000/v1"
    assert run.outputs["endpoint_ip"] == f"http://{EXTERNAL_IP}:8000"
    assert run.outputs["external_ip"] == EXTERNAL_IP


def test_dns_name_overrides_the_stack_name() -> None:
    run = run_program("v5e1", {**WITH_DNS, "tpu-vllm:dns.name": "gemma.e2b"})
    assert run.one(RECORD_SET).inputs["name"] == "gemma.e2b.models.example.com."
    assert run.outputs["endpoint"] == "http://gemma.e2b.models.example.com:8000"


def test_a_renewed_node_moves_the_record_not_the_name() -> None:
    """After a renewal the node has a new IP: the record's data follows, its name stays, so
    Pulumi updates the record in place and clients keep the same URL."""
    new_ip = "198.51.100.77"

    def renewed(args: mocks.MockResourceArgs) -> dict[str, Any]:
        outputs = cloud_outputs(args)
        if "external_ip" in outputs:
            outputs["external_ip"] = new_ip
        return outputs

    before = run_program("v5e1", WITH_DNS)
    after = run_program("v5e1", WITH_DNS, outputs_for=renewed)
    assert after.one(RECORD_SET).inputs["rrdatas"] == [new_ip]
    assert after.one(RECORD_SET).inputs["name"] == before.one(RECORD_SET).inputs["name"]
    assert after.outputs["endpoint"] == before.outputs["endpoint"]
    assert after.outputs["endpoint_ip"] == f"http://{new_ip}:8000"


GET_RECORD_SET = "gcp:dns/getRecordSet:getRecordSet"
LAST_IP = "203.0.113.9"


def without_address(stack: str) -> NewResource:
    """Cloud outputs in which the node (VM) or the reserved address (GKE) has no address."""

    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = cloud_outputs(args)
        if stack == "v5e1" and "external_ip" in result:
            result["external_ip"] = None  # the queued resource's outputs while no node is ACTIVE
        if stack == "v6e4-gke" and args.typ == "gcp:compute/address:Address":
            result["address"] = ""
        return result

    return outputs


def record_lookup(existing: list[str] | None) -> Call:
    """Invokes as the provider answers them: the zone exists; the A record holds `existing`,
    or does not exist (terraform-provider-google's data_source_dns_record_set.go then fails
    with "Only expected 1 record set, got 0")."""
    zones = managed_zone_lookup(MANAGED_ZONES)

    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == GET_MANAGED_ZONE:
            return zones(args)
        if args.token == GET_RECORD_SET:
            if existing is None:
                raise InvokeFailure("Only expected 1 record set, got 0")
            return {**dict(args.args), "rrdatas": existing, "ttl": 60}
        return dict(args.args)

    return call


@pytest.mark.parametrize("stack", ["v5e1", "v6e4-gke"])
def test_without_an_address_the_record_keeps_its_last_data_never_an_empty_list(
    stack: str,
) -> None:
    """The provider's record set requires exactly one of rrdatas / routing_policy
    (terraform-provider-google resource_dns_record_set.go, `ExactlyOneOf`): an empty list fails
    the update. With no address the record keeps what Cloud DNS holds now."""
    run = run_program(
        stack, WITH_DNS, outputs_for=without_address(stack), call=record_lookup([LAST_IP])
    )
    record = run.one(RECORD_SET)
    assert record.inputs["rrdatas"] == [LAST_IP]
    lookups = [args for token, args in run.calls if token == GET_RECORD_SET]
    assert lookups == [
        {
            "managedZone": MANAGED_ZONE,
            "name": record.inputs["name"],
            "type": "A",
            "project": "test-project",
        }
    ]
    assert any("keeps its last data" in w and LAST_IP in w for w in run.warnings), run.warnings


@pytest.mark.parametrize("address", [None, ""], ids=["none", "empty"])
def test_without_an_address_or_a_record_nothing_is_written_and_the_reason_is_named(
    address: str | None,
) -> None:
    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = cloud_outputs(args)
        if "external_ip" in result:
            result["external_ip"] = address
        return result

    run = run_program(
        "v5e1", WITH_DNS, outputs_for=outputs, call=record_lookup(None), expect_error=True
    )
    assert all(r.inputs.get("rrdatas") for r in run.of_type(RECORD_SET))  # never []
    message = str(run.error)
    assert "tpu-vllm:dns.managedZone" in message
    assert "no external address" in message and "v5e1.models.example.com." in message
    assert "nothing was written" in message and "Fix:" in message


def test_with_an_address_the_record_is_not_read_back() -> None:
    run = run_program("v5e1", WITH_DNS, call=record_lookup([LAST_IP]))
    assert run.one(RECORD_SET).inputs["rrdatas"] == [EXTERNAL_IP]
    assert GET_RECORD_SET not in [token for token, _ in run.calls]


def test_the_zone_is_looked_up_at_preview_too() -> None:
    run = run_program("v5e1", WITH_DNS, preview=True)
    assert GET_MANAGED_ZONE in [token for token, _ in run.calls]
    assert run.one(RECORD_SET).inputs["name"] == "v5e1.models.example.com."


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_a_zone_that_does_not_exist_stops_the_run_before_anything_is_created(
    preview: bool,
) -> None:
    run = run_program(
        "v5e1", {"tpu-vllm:dns.managedZone": "no-such-zone"}, preview=preview, expect_error=True
    )
    message = str(run.error)
    assert "tpu-vllm:dns.managedZone" in message
    assert "'no-such-zone'" in message
    assert "projects/test-project/managedZones/no-such-zone not found" in message  # the cause
    assert "Fix:" in message
    assert "gcloud dns managed-zones list --project test-project" in message
    assert "None" not in message
    assert run.resources == []
    assert run.outputs == {}


def test_a_zone_the_deployer_may_not_read_names_the_key_and_the_error() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == GET_MANAGED_ZONE:
            raise InvokeFailure("googleapi: Error 403: Forbidden, forbidden")
        return dict(args.args)

    run = run_program("v6e4", WITH_DNS, call=call, expect_error=True)
    assert "tpu-vllm:dns.managedZone" in str(run.error)
    assert "Error 403" in str(run.error)
    # The role that also lets the deployer write the record (README "Prerequisites"), not a
    # read-only one that would fail one step later at the record.
    assert "roles/dns.admin" in str(run.error)
    assert "roles/dns.reader" not in str(run.error)
    assert run.resources == []


def test_a_private_zone_warns_that_outside_clients_cannot_resolve_it() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == GET_MANAGED_ZONE:
            return {**dict(args.args), "dnsName": "corp.internal.", "visibility": "private"}
        return dict(args.args)

    run = run_program("v5e1", WITH_DNS, call=call)
    assert run.one(RECORD_SET).inputs["name"] == "v5e1.corp.internal."
    assert any("private zone" in w and "endpoint_ip" in w for w in run.warnings)


@pytest.mark.parametrize(
    ("changes", "key", "text"),
    [
        (
            {"tpu-vllm:dns.name": "api"},
            "tpu-vllm:dns.name",
            "has no effect without `tpu-vllm:dns.managedZone`",
        ),
        (
            {"tpu-vllm:dns.managedZone": "models.example.com."},
            "tpu-vllm:dns.managedZone",
            "not a Cloud DNS managed zone name",
        ),
        (
            {**WITH_DNS, "tpu-vllm:dns.name": "Bad_Name"},
            "tpu-vllm:dns.name",
            "not a host name",
        ),
        (
            {**WITH_DNS, "tpu-vllm:dns.nmae": "api"},
            "tpu-vllm:dns.nmae",
            "did you mean `name`",
        ),
    ],
    ids=["name without zone", "zone dns name instead of zone name", "bad name", "typo"],
)
def test_bad_dns_config_is_rejected_before_any_lookup_or_resource(
    changes: dict[str, Any], key: str, text: str
) -> None:
    run = run_program("v5e1", changes, expect_error=True)
    assert isinstance(run.error, ConfigError), run.error
    assert key in str(run.error)
    assert text in str(run.error)
    assert run.resources == []
    assert GET_MANAGED_ZONE not in [token for token, _ in run.calls]


def test_the_credential_free_plan_shows_the_record_and_the_name() -> None:
    text = plan("v5e1", changes=WITH_DNS)
    assert "endpoint-name-a  (gcp:dns/recordSet:RecordSet)" in text
    assert f'name: "v5e1.<{MANAGED_ZONE}.dnsName>."' in text
    assert f'endpoint: "http://v5e1.<{MANAGED_ZONE}.dnsName>:8000"' in text
