"""The gcp stand-in provider over gRPC, as the engine drives it (tests/support/standins/client.py):
its checks against pulumi-gcp 10.2.0's schema and Terraform's validators, its replace sets, the
documented shapes of its outputs, its "cloud" across processes, and its write-through to the
loopback Secret Manager and bucket fakes.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from pulumi.runtime.proto import provider_pb2

from components import monitoring_bodies as bodies
from components import vllm_metrics as vm
from components.vm.queued_resource_spec import node_ids
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.standins.client import Plugin, urn
from tests.support.standins.gcp_common import project_number
from tests.support.standins.gcp_container import seed_cluster
from tests.support.standins.gcp_dns import seed_zone
from tests.support.standins.gcp_monitoring import seed_uptime_check_ips
from tests.support.standins.store import STATE_ENV, everything

PROJECT = "proj-standin"
NUMBER = project_number(PROJECT)
ACCOUNT = "gcp:serviceaccount/account:Account"
SA_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
FIREWALL = "gcp:compute/firewall:Firewall"
ADDRESS = "gcp:compute/address:Address"
SECRET = "gcp:secretmanager/secret:Secret"
VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
RECORD = "gcp:dns/recordSet:RecordSet"
CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
UPTIME = "gcp:monitoring/uptimeCheckConfig:UptimeCheckConfig"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
UPTIME_IPS = "gcp:monitoring/getUptimeCheckIPs:getUptimeCheckIPs"
NONE = provider_pb2.DiffResponse.DIFF_NONE
SENTINEL = "STANDINSECRETSENTINEL-7f3a"
RULE = {
    "network": "default",
    "direction": "INGRESS",
    "allows": [{"protocol": "tcp", "ports": ["8000"]}],
    "sourceRanges": ["203.0.113.0/24", "198.51.100.0/24"],
    "targetTags": ["tpu-vllm-v5e1"],
}


#: The program's own uptime check body (components/monitoring_bodies.py), less the label
#: `project_id` (the API adds it when left out).
CHECK = bodies.uptime_check("v5e1", PROJECT, "198.51.100.7", 8000)
del CHECK["monitoredResource"]["labels"]["project_id"]


def alert(check_id: str) -> dict[str, Any]:
    """The program's endpoint-down policy, watching uptime check `check_id`."""
    watch = bodies.Watch("v5e1", "vm", vm.queries_for("v5e1"), None, check_id, node_ids("v5e1"))
    return bodies.alert_policies(watch, [])["endpoint-down"]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "cloud"


@pytest.fixture
def gcp(state: Path) -> Iterator[Plugin]:
    with Plugin("gcp", {STATE_ENV: str(state)}) as plugin:
        plugin.configure("gcp", {"project": PROJECT, "region": "us-east5"})
        yield plugin


def test_check_names_a_missing_required_input_a_wrong_type_and_a_wrong_enum(gcp: Plugin) -> None:
    _, failures, _ = gcp.check(
        urn(FIREWALL, "fw"), {k: v for k, v in RULE.items() if k != "network"}
    )
    assert (
        "network",
        'Missing required argument. The argument "network" is required, but no '
        "definition was found.",
    ) in failures
    _, failures, _ = gcp.check(urn(FIREWALL, "fw"), {**RULE, "direction": "SIDEWAYS"})
    assert failures == [
        ("direction", 'expected direction to be one of ["INGRESS" "EGRESS" ""], got SIDEWAYS')
    ]
    _, failures, _ = gcp.check(urn(FIREWALL, "fw"), {**RULE, "priority": "high"})
    assert failures == [("priority", "expected type of priority to be int")]
    _, failures, _ = gcp.check(urn(FIREWALL, "fw"), {**RULE, "sourceRange": ["0.0.0.0/0"]})
    assert failures == [("sourceRange", "sourceRange: Invalid or unknown key")]
    _, failures, _ = gcp.check(urn(ADDRESS, "a"), {"addressType": "PUBLIC"})
    assert failures and failures[0][0] == "addressType"
    _, failures, _ = gcp.check(urn(SECRET, "s"), {"replication": {"automatic": True}})
    assert ("replication.automatic", "replication.automatic: Invalid or unknown key") in failures
    _, failures, _ = gcp.check(
        urn(RECORD, "r"), {"managedZone": "z", "name": "a.example.com", "type": "A", "rrdatas": []}
    )
    assert {f[0] for f in failures} == {"name", "rrdatas"}


def test_check_autonames_a_missing_name_and_keeps_it_on_the_next_run(gcp: Plugin) -> None:
    inputs, failures, _ = gcp.check(urn(FIREWALL, "vm-serving"), RULE, seed=b"one")
    assert not failures
    assert re.fullmatch(r"vm-serving-[0-9a-f]{7}", inputs["name"])
    assert inputs["priority"] == 1000  # Terraform's Default
    again, _, _ = gcp.check(urn(FIREWALL, "vm-serving"), RULE, olds=inputs, seed=b"two")
    assert again["name"] == inputs["name"]


def test_a_force_new_change_replaces_and_others_update_in_place(gcp: Plugin) -> None:
    resource_id, fw = gcp.up(FIREWALL, "fw", {**RULE, "name": "tpu-vllm-fw"})
    inputs = {**RULE, "name": "tpu-vllm-fw", "priority": 1000}
    replaced = gcp.diff(urn(FIREWALL, "fw"), resource_id, fw, {**inputs, "direction": "EGRESS"})
    assert list(replaced.replaces) == ["direction"]
    updated = gcp.diff(
        urn(FIREWALL, "fw"), resource_id, fw, {**inputs, "sourceRanges": ["192.0.2.0/24"]}
    )
    assert list(updated.replaces) == [] and list(updated.diffs) == ["sourceRanges"]
    reordered = {
        **inputs,
        "sourceRanges": list(reversed(RULE["sourceRanges"])),
        "network": fw["network"],
    }
    assert gcp.diff(urn(FIREWALL, "fw"), resource_id, fw, reordered).changes == updated.DIFF_NONE
    secret_id, secret = gcp.up(SECRET, "s", {"secretId": "k1", "replication": {"auto": {}}})
    renamed = gcp.diff(
        urn(SECRET, "s"), secret_id, secret, {"secretId": "k2", "replication": {"auto": {}}}
    )
    assert list(renamed.replaces) == ["secretId"] and renamed.deleteBeforeReplace
    relabelled = gcp.diff(
        urn(SECRET, "s"),
        secret_id,
        secret,
        {"secretId": "k1", "replication": {"auto": {}}, "labels": {"a": "b"}},
    )
    assert list(relabelled.replaces) == [] and list(relabelled.diffs) == ["labels"]
    _, sa = gcp.up(ACCOUNT, "sa", {"accountId": "tpu-vllm-node"})
    other = gcp.diff(urn(ACCOUNT, "sa"), sa["name"], sa, {"accountId": "tpu-vllm-other"})
    assert list(other.replaces) == ["accountId"]
    described = gcp.diff(
        urn(ACCOUNT, "sa"), sa["name"], sa, {"accountId": "tpu-vllm-node", "displayName": "x"}
    )
    assert list(described.replaces) == []


def test_outputs_have_the_documented_shapes(gcp: Plugin) -> None:
    sa_id, sa = gcp.up(ACCOUNT, "sa", {"accountId": "tpu-vllm-v5e1", "displayName": "node"})
    email = f"tpu-vllm-v5e1@{PROJECT}.iam.gserviceaccount.com"
    assert sa_id == sa["name"] == f"projects/{PROJECT}/serviceAccounts/{email}"
    assert (sa["email"], sa["member"]) == (email, f"serviceAccount:{email}")
    assert re.fullmatch(r"[0-9]{21}", sa["uniqueId"])
    fw_id, fw = gcp.up(FIREWALL, "fw", {**RULE, "name": "tpu-vllm-ssh"})
    assert fw_id == f"projects/{PROJECT}/global/firewalls/tpu-vllm-ssh"
    assert fw["selfLink"] == f"https://www.googleapis.com/compute/v1/{fw_id}"
    assert (
        fw["network"]
        == f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/global/networks/default"
    )
    address_id, address = gcp.up(ADDRESS, "lb", {"name": "tpu-vllm-lb", "networkTier": "PREMIUM"})
    assert address_id == f"projects/{PROJECT}/regions/us-east5/addresses/tpu-vllm-lb"
    assert address["selfLink"] == f"https://www.googleapis.com/compute/v1/{address_id}"
    assert re.fullmatch(r"198\.51\.100\.\d+", address["address"])
    secret_id, secret = gcp.up(
        SECRET,
        "key",
        {"secretId": "tpu-vllm-key", "replication": {"auto": {}}, "labels": {"stack": "v5e1"}},
    )
    assert secret_id == f"projects/{PROJECT}/secrets/tpu-vllm-key"
    assert secret["name"] == f"projects/{NUMBER}/secrets/tpu-vllm-key"
    assert secret["effectiveLabels"] == {"stack": "v5e1", "goog-pulumi-provisioned": "true"}
    version_id, version, secret_out = gcp.create(
        urn(VERSION, "v"),
        {"secret": secret_id, "secretData": SENTINEL, "enabled": True},
        ("secretData",),
    )
    assert version_id == version["name"] == f"projects/{NUMBER}/secrets/tpu-vllm-key/versions/1"
    assert version["version"] == "1" and "secretData" in secret_out
    member_id, member = gcp.up(
        SECRET_MEMBER,
        "m",
        {
            "secretId": "tpu-vllm-key",
            "role": "roles/secretmanager.secretAccessor",
            "member": sa["member"],
        },
    )
    assert member_id == f"{secret_id}/roles/secretmanager.secretAccessor/{sa['member']}"
    assert member["secretId"] == secret_id and base64.b64decode(member["etag"])
    wi_id, _ = gcp.up(
        SA_MEMBER,
        "wi",
        {
            "serviceAccountId": sa["name"],
            "role": "roles/iam.workloadIdentityUser",
            "member": f"serviceAccount:{PROJECT}.svc.id.goog[ns/ksa]",
        },
    )
    assert wi_id.startswith(f"{sa['name']}/roles/iam.workloadIdentityUser/")
    bucket_id, bucket = gcp.up(BUCKET, "b", {"name": "tpu-vllm-cache", "location": "us-west4"})
    assert (bucket_id, bucket["location"], bucket["url"]) == (
        "tpu-vllm-cache",
        "US-WEST4",
        "gs://tpu-vllm-cache",
    )
    assert bucket["selfLink"] == "https://www.googleapis.com/storage/v1/b/tpu-vllm-cache"
    writer_id, writer = gcp.up(
        BUCKET_MEMBER,
        "w",
        {"bucket": "tpu-vllm-cache", "role": "roles/storage.objectUser", "member": sa["member"]},
    )
    assert writer["bucket"] == "b/tpu-vllm-cache" and writer_id.startswith(
        "b/tpu-vllm-cache/roles/"
    )


def test_the_cloud_outlives_the_process_and_destroy_leaves_nothing(state: Path) -> None:
    env = {STATE_ENV: str(state)}
    with Plugin("gcp", env) as first:
        first.configure("gcp", {"project": PROJECT})
        sa_id, sa = first.up(ACCOUNT, "sa", {"accountId": "tpu-vllm-v5e1"})
        fw_id, fw = first.up(FIREWALL, "fw", RULE)
        with pytest.raises(Exception, match="409"):
            first.up(ACCOUNT, "again", {"accountId": "tpu-vllm-v5e1"})
    with Plugin("gcp", env) as second:
        second.configure("gcp", {"project": PROJECT})
        assert second.read(urn(ACCOUNT, "sa"), sa_id, sa, {})[0] == sa_id
        assert second.read(urn(FIREWALL, "fw"), fw_id, fw, {})[0] == fw_id
        second.delete(urn(FIREWALL, "fw"), fw_id, fw)
        second.delete(urn(ACCOUNT, "sa"), sa_id, sa)
        assert second.read(urn(ACCOUNT, "sa"), sa_id, sa, {})[0] == ""  # gone: refresh drops it
    assert everything(state) == {}


def test_a_preview_creates_nothing_and_leaves_computed_outputs_unknown(
    gcp: Plugin, state: Path
) -> None:
    _, outputs, _ = gcp.create(urn(ACCOUNT, "sa"), {"accountId": "tpu-vllm-v5e1"}, preview=True)
    assert outputs["email"] == "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # rpc.UNKNOWN
    assert not state.exists() or everything(state) == {}


def test_secret_data_stays_secret_and_out_of_the_store(gcp: Plugin, state: Path) -> None:
    secret_id, _ = gcp.up(SECRET, "k", {"secretId": "key", "replication": {"auto": {}}})
    gcp.create(urn(VERSION, "v"), {"secret": secret_id, "secretData": SENTINEL}, ("secretData",))
    for path in state.rglob("*"):
        if path.is_file():
            assert SENTINEL not in path.read_text()


def test_secret_manager_resources_write_through_to_the_configured_endpoint(
    state: Path, fake_secret_manager: FakeSecretManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the provider's own override (GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT), the secret and
    its version are where the node's Secret Manager client reads them; the HF token that
    save_hf_token.py stored there is what getSecret finds."""
    fake_secret_manager.add_secret(PROJECT, "hf-token")
    env = {
        STATE_ENV: str(state),
        "GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT": f"{fake_secret_manager.url}/v1/",
        "GOOGLE_OAUTH_ACCESS_TOKEN": fake_secret_manager.token,
    }
    with Plugin("gcp", env) as gcp:
        gcp.configure("gcp", {"project": PROJECT})
        found, _ = gcp.invoke("gcp:secretmanager/getSecret:getSecret", {"secretId": "hf-token"})
        assert found["name"] == f"projects/{NUMBER}/secrets/hf-token"
        with pytest.raises(Exception, match="not found"):
            gcp.invoke("gcp:secretmanager/getSecret:getSecret", {"secretId": "missing"})
        secret_id, secret = gcp.up(
            SECRET, "k", {"secretId": "tpu-vllm-key", "replication": {"auto": {}}}
        )
        version_id, version, _ = gcp.create(
            urn(VERSION, "v"), {"secret": secret_id, "secretData": SENTINEL}, ("secretData",)
        )
        assert fake_secret_manager.payload(PROJECT, "tpu-vllm-key") == SENTINEL.encode()
        assert version_id == f"projects/{NUMBER}/secrets/tpu-vllm-key/versions/1"
        gcp.delete(urn(VERSION, "v"), version_id, version)
        assert fake_secret_manager.version_states(PROJECT, "tpu-vllm-key") == {1: "DESTROYED"}
        gcp.delete(urn(SECRET, "k"), secret_id, secret)
        with pytest.raises(Exception, match="not found"):
            gcp.invoke("gcp:secretmanager/getSecret:getSecret", {"secretId": "tpu-vllm-key"})


def test_a_bucket_is_a_directory_of_the_bucket_fake_and_needs_force_destroy(
    state: Path, tmp_path: Path
) -> None:
    root = tmp_path / "gcs"
    root.mkdir()
    with Plugin("gcp", {STATE_ENV: str(state), "TPU_VLLM_STANDIN_GCS_ROOT": str(root)}) as gcp:
        gcp.configure("gcp", {"project": PROJECT})
        kept_id, kept = gcp.up(BUCKET, "kept", {"name": "kept-cache", "location": "US-WEST4"})
        gone_id, gone = gcp.up(
            BUCKET, "gone", {"name": "gone-cache", "location": "US-WEST4", "forceDestroy": True}
        )
        for name in ("kept-cache", "gone-cache"):
            assert (root / name).is_dir()  # where the fake gcloud and JSON API find it
            (root / name / "xla").mkdir()
            (root / name / "xla" / "entry").write_bytes(b"x")
        with pytest.raises(Exception, match="without `force_destroy` set to true"):
            gcp.delete(urn(BUCKET, "kept"), kept_id, kept)
        gcp.delete(urn(BUCKET, "gone"), gone_id, gone)
    assert (root / "kept-cache").is_dir() and not (root / "gone-cache").exists()


def test_dns_lookups_see_the_seeded_zone_and_the_records_made(gcp: Plugin, state: Path) -> None:
    seed_zone(state, PROJECT, "models", "models.example.com.")
    zone, _ = gcp.invoke("gcp:dns/getManagedZone:getManagedZone", {"name": "models"})
    assert (zone["dnsName"], zone["visibility"]) == ("models.example.com.", "public")
    with pytest.raises(Exception, match="does not exist"):
        gcp.invoke("gcp:dns/getManagedZone:getManagedZone", {"name": "other"})
    lookup = {"managedZone": "models", "name": "gemma.models.example.com.", "type": "A"}
    with pytest.raises(Exception, match="Only expected 1 record set, got 0"):
        gcp.invoke("gcp:dns/getRecordSet:getRecordSet", lookup)
    record_id, record = gcp.up(RECORD, "a", {**lookup, "ttl": 60.0, "rrdatas": ["198.51.100.7"]})
    assert record_id == f"projects/{PROJECT}/managedZones/models/rrsets/gemma.models.example.com./A"
    found, _ = gcp.invoke("gcp:dns/getRecordSet:getRecordSet", lookup)
    assert found["rrdatas"] == ["198.51.100.7"]
    moved = gcp.diff(
        urn(RECORD, "a"), record_id, record, {**lookup, "ttl": 60, "rrdatas": ["198.51.100.8"]}
    )
    assert list(moved.replaces) == [] and list(moved.diffs) == ["rrdatas"]
    gcp.update(
        urn(RECORD, "a"), record_id, record, {**lookup, "ttl": 60, "rrdatas": ["198.51.100.8"]}
    )
    assert gcp.invoke("gcp:dns/getRecordSet:getRecordSet", lookup)[0]["rrdatas"] == ["198.51.100.8"]


def test_gke_cluster_pool_and_lookups(gcp: Plugin, state: Path) -> None:
    versions, _ = gcp.invoke(
        "gcp:container/getEngineVersions:getEngineVersions", {"location": "us-east5"}
    )
    assert set(versions["releaseChannelDefaultVersion"]) == {"RAPID", "REGULAR", "STABLE"}
    with pytest.raises(Exception, match="not found"):
        gcp.up(POOL, "p", {"cluster": "nope", "location": "us-east5", "nodeCount": 1.0})
    cluster_id, cluster = gcp.up(
        CLUSTER,
        "c",
        {
            "name": "tpu-vllm-gke",
            "location": "us-east5",
            "initialNodeCount": 1.0,
            "removeDefaultNodePool": True,
            "releaseChannel": {"channel": "REGULAR"},
        },
    )
    assert cluster_id == f"projects/{PROJECT}/locations/us-east5/clusters/tpu-vllm-gke"
    assert cluster["masterVersion"] == versions["releaseChannelDefaultVersion"]["REGULAR"]
    x509.load_pem_x509_certificate(base64.b64decode(cluster["masterAuth"]["clusterCaCertificate"]))
    config = {
        "machineType": "e2-standard-4",
        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
    }
    pool_id, pool = gcp.up(
        POOL,
        "p",
        {
            "name": "system",
            "cluster": "tpu-vllm-gke",
            "location": "us-east5",
            "nodeCount": 1.0,
            "nodeConfig": config,
        },
    )
    assert pool_id == f"{cluster_id}/nodePools/system"
    assert pool["management"] == {"autoRepair": True, "autoUpgrade": True}
    scopes = gcp.diff(
        urn(POOL, "p"), pool_id, pool, {**pool, "nodeConfig": {**config, "oauthScopes": []}}
    )
    assert list(scopes.replaces) == ["nodeConfig"]
    machine = gcp.diff(
        urn(POOL, "p"),
        pool_id,
        pool,
        {**pool, "nodeConfig": {**config, "machineType": "e2-standard-8"}},
    )
    assert list(machine.replaces) == [] and list(machine.diffs) == ["nodeConfig"]
    with pytest.raises(Exception, match="deletion_protection is set to true"):
        gcp.delete(urn(CLUSTER, "c"), cluster_id, cluster)  # the default is true
    seed_cluster(
        state,
        PROJECT,
        "us-east5",
        "shared",
        {
            "masterVersion": "1.34.1-gke.1829001",
            "workloadIdentityConfig": {"workloadPool": f"{PROJECT}.svc.id.goog"},
        },
    )
    shared, _ = gcp.invoke(
        "gcp:container/getCluster:getCluster", {"name": "shared", "location": "us-east5"}
    )
    assert shared["workloadIdentityConfigs"] == [{"workloadPool": f"{PROJECT}.svc.id.goog"}]
    with pytest.raises(Exception, match="not found"):
        gcp.invoke(
            "gcp:container/getCluster:getCluster", {"name": "absent", "location": "us-east5"}
        )


def test_a_name_and_a_path_of_the_same_parent_are_no_change(gcp: Plugin) -> None:
    """Terraform's DiffSuppressFuncs: the state holds `projects/P/secrets/S` and `b/B` where the
    program passes `S` and `B`; a second `pulumi up` must not replace the grants."""
    secret_id, _ = gcp.up(SECRET, "s", {"secretId": "tpu-vllm-key", "replication": {"auto": {}}})
    grant = {"secretId": "tpu-vllm-key", "role": "roles/secretmanager.secretAccessor"}
    grant["member"] = "serviceAccount:node@proj-standin.iam.gserviceaccount.com"
    member_id, member = gcp.up(SECRET_MEMBER, "m", grant)
    assert member["secretId"] == secret_id
    assert gcp.diff(urn(SECRET_MEMBER, "m"), member_id, member, grant).changes == NONE
    gcp.up(BUCKET, "b", {"name": "tpu-vllm-cache", "location": "US-WEST4"})
    writer = {
        "bucket": "tpu-vllm-cache",
        "role": "roles/storage.objectUser",
        "member": grant["member"],
    }
    writer_id, written = gcp.up(BUCKET_MEMBER, "w", writer)
    assert gcp.diff(urn(BUCKET_MEMBER, "w"), writer_id, written, writer).changes == NONE
    other = gcp.diff(urn(BUCKET_MEMBER, "w"), writer_id, written, {**writer, "bucket": "other"})
    assert list(other.replaces) == ["bucket"]


def test_monitoring_outputs_have_the_documented_shapes_and_force_new_replaces(
    gcp: Plugin,
) -> None:
    body = {"displayName": "tpu-vllm v5e1", "mosaicLayout": {"columns": 48, "tiles": []}}
    spelled = json.dumps(body, indent=1, sort_keys=True)  # as the program writes it
    dash_id, dash = gcp.up(DASHBOARD, "d", {"dashboardJson": spelled})
    assert re.fullmatch(rf"projects/{NUMBER}/dashboards/[0-9a-f-]{{36}}", dash_id)
    read_back = json.loads(dash["dashboardJson"])  # the API's answer, Go's compact spelling
    assert read_back == {**body, "name": dash_id, "etag": read_back["etag"]}
    assert dash["dashboardJson"] == json.dumps(read_back, sort_keys=True, separators=(",", ":"))
    inputs = {"dashboardJson": spelled}
    assert gcp.diff(urn(DASHBOARD, "d"), dash_id, dash, inputs).changes == NONE  # name, etag
    retitled = {"dashboardJson": json.dumps({**body, "displayName": "other"})}
    changed = gcp.diff(urn(DASHBOARD, "d"), dash_id, dash, retitled)
    assert list(changed.diffs) == ["dashboardJson"] and list(changed.replaces) == []
    updated = gcp.update(urn(DASHBOARD, "d"), dash_id, dash, retitled)
    assert json.loads(updated["dashboardJson"])["etag"] != read_back["etag"]
    moved = gcp.diff(urn(DASHBOARD, "d"), dash_id, dash, {**inputs, "project": "elsewhere"})
    assert list(moved.replaces) == ["project"]
    _, failures, _ = gcp.check(urn(DASHBOARD, "d"), {"dashboardJson": "{not json"})
    assert failures and failures[0][0] == "dashboardJson" and "invalid JSON" in failures[0][1]

    checked, failures, _ = gcp.check(urn(UPTIME, "u"), CHECK)
    assert not failures and checked["httpCheck"]["requestMethod"] == "GET"  # nested Default
    check_id, check = gcp.up(UPTIME, "u", CHECK)
    assert (
        check_id
        == check["name"]
        == f"projects/{PROJECT}/uptimeCheckConfigs/" + (check["uptimeCheckId"])
    )
    assert check["monitoredResource"]["labels"] == {"host": "198.51.100.7", "project_id": PROJECT}
    assert gcp.diff(urn(UPTIME, "u"), check_id, check, checked).changes == NONE
    other_host = {**checked, "monitoredResource": {"type": "uptime_url", "labels": {"host": "h"}}}
    assert list(gcp.diff(urn(UPTIME, "u"), check_id, check, other_host).replaces) == [
        "monitoredResource"
    ]
    post = {**checked, "httpCheck": {**checked["httpCheck"], "requestMethod": "POST"}}
    assert list(gcp.diff(urn(UPTIME, "u"), check_id, check, post).replaces) == ["httpCheck"]
    slower = gcp.diff(urn(UPTIME, "u"), check_id, check, {**checked, "period": "300s"})
    assert list(slower.diffs) == ["period"] and list(slower.replaces) == []
    vpc = gcp.diff(urn(UPTIME, "u"), check_id, check, {**checked, "checkerType": "VPC_CHECKERS"})
    assert list(vpc.replaces) == ["checkerType"]
    _, failures, _ = gcp.check(urn(UPTIME, "u"), {"displayName": "x", "timeout": "10s"})
    assert (
        "monitoredResource",
        '"monitored_resource": one of `monitored_resource,resource_group,synthetic_monitor` '
        "must be specified",
    ) in failures

    policy_id, policy = gcp.up(ALERT, "a", alert(check["uptimeCheckId"]))
    assert policy_id == policy["name"] and re.fullmatch(
        rf"projects/{PROJECT}/alertPolicies/[0-9]{{19}}", policy_id
    )
    assert policy["conditions"][0]["name"].startswith(f"{policy_id}/conditions/")
    [record] = policy["creationRecords"]
    assert record["mutateTime"].endswith("Z") and "@" in record["mutatedBy"]
    assert policy["enabled"] is True and policy["documentation"]["mimeType"] == "text/markdown"
    policy_inputs, _, _ = gcp.check(urn(ALERT, "a"), alert(check["uptimeCheckId"]))
    assert gcp.diff(urn(ALERT, "a"), policy_id, policy, policy_inputs).changes == NONE
    renamed = gcp.diff(urn(ALERT, "a"), policy_id, policy, {**policy_inputs, "displayName": "x"})
    assert list(renamed.diffs) == ["displayName"] and list(renamed.replaces) == []
    _, failures, _ = gcp.check(urn(ALERT, "a"), {**alert("c"), "combiner": "XOR"})
    assert failures and failures[0][0] == "combiner"
    with pytest.raises(Exception, match="please ensure all associated Alert Policies are deleted"):
        gcp.delete(urn(UPTIME, "u"), check_id, check)  # the policy still watches it
    gcp.delete(urn(ALERT, "a"), policy_id, policy)
    gcp.delete(urn(UPTIME, "u"), check_id, check)
    assert gcp.read(urn(UPTIME, "u"), check_id, check, {})[0] == ""


def test_project_iam_member_id_and_replacements(gcp: Plugin) -> None:
    grant = {
        "project": PROJECT,
        "role": "roles/monitoring.metricWriter",
        "member": f"serviceAccount:node@{PROJECT}.iam.gserviceaccount.com",
    }
    member_id, member = gcp.up(PROJECT_MEMBER, "m", grant)
    assert member_id == f"{PROJECT}/roles/monitoring.metricWriter/{grant['member']}"
    assert member["project"] == PROJECT and base64.b64decode(member["etag"])
    path = {**grant, "project": f"projects/{PROJECT}"}
    assert gcp.diff(urn(PROJECT_MEMBER, "m"), member_id, member, path).changes == NONE
    for prop, value in (("role", "roles/logging.logWriter"), ("project", "elsewhere")):
        diff = gcp.diff(urn(PROJECT_MEMBER, "m"), member_id, member, {**grant, prop: value})
        assert list(diff.replaces) == [prop]
    _, failures, _ = gcp.check(urn(PROJECT_MEMBER, "m"), {k: grant[k] for k in ("role", "member")})
    assert [f[0] for f in failures] == ["project"]  # not taken from the provider
    gcp.delete(urn(PROJECT_MEMBER, "m"), member_id, member)
    assert gcp.read(urn(PROJECT_MEMBER, "m"), member_id, member, {})[0] == ""


def test_uptime_check_ips_and_the_clusters_monitoring_config(gcp: Plugin, state: Path) -> None:
    found, _ = gcp.invoke(UPTIME_IPS, {})
    assert found["id"] == "uptime_check_ips_id" and len(found["uptimeCheckIps"]) >= 3
    documentation = [ipaddress.ip_network(n) for n in ("203.0.113.0/24", "2001:db8::/32")]
    for ip in found["uptimeCheckIps"]:
        assert set(ip) == {"region", "location", "ipAddress"} and ip["location"]
        address = ipaddress.ip_address(ip["ipAddress"])
        assert any(address in net for net in documentation if net.version == address.version)
    seeded = [{"region": "EUROPE", "location": "Belgium", "ipAddress": "192.0.2.99"}]
    seed_uptime_check_ips(state, seeded)
    assert gcp.invoke(UPTIME_IPS, {})[0]["uptimeCheckIps"] == seeded

    inputs = {
        "name": "tpu-vllm-gke",
        "location": "us-east5",
        "initialNodeCount": 1.0,
        "deletionProtection": False,
        "monitoringConfig": {"managedPrometheus": {"enabled": True}},
    }
    checked, failures, _ = gcp.check(urn(CLUSTER, "c"), inputs)
    assert not failures
    cluster_id, cluster = gcp.up(CLUSTER, "c", inputs)
    # A block without enableComponents is sent with an empty set (expandMonitoringConfig),
    # which GKE reads as every system metric off: the program names SYSTEM_COMPONENTS.
    assert cluster["monitoringConfig"] == {
        "enableComponents": [],
        "managedPrometheus": {"enabled": True},
    }
    assert gcp.diff(urn(CLUSTER, "c"), cluster_id, cluster, checked).changes == NONE
    off = {**checked, "monitoringConfig": {"managedPrometheus": {"enabled": False}}}
    turned = gcp.diff(urn(CLUSTER, "c"), cluster_id, cluster, off)
    assert list(turned.diffs) == ["monitoringConfig"] and list(turned.replaces) == []
    cluster = gcp.update(urn(CLUSTER, "c"), cluster_id, cluster, off)
    looked_up, _ = gcp.invoke(
        "gcp:container/getCluster:getCluster", {"name": "tpu-vllm-gke", "location": "us-east5"}
    )
    assert looked_up["monitoringConfigs"] == [
        {
            "enableComponents": [],
            "managedPrometheuses": [{"enabled": False, "autoMonitoringConfigs": []}],
            "advancedDatapathObservabilityConfigs": [],
        }
    ]
    _, failures, _ = gcp.check(
        urn(CLUSTER, "c"),
        {
            **inputs,
            "monitoringConfig": {
                "managedPrometheus": {"enabled": True, "autoMonitoringConfig": {"scope": "SOME"}}
            },
        },
    )
    assert [f[0] for f in failures] == [
        "monitoringConfig.managedPrometheus.autoMonitoringConfig.scope"
    ]
