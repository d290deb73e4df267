"""What the cloud would answer for each resource type, for programs run under mocks.

Mocks echo inputs back as outputs; these add the outputs a real `pulumi up` would produce
(a service account's email, the queued resource's zone and IPs), so exports and the values
that flow between components can be asserted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from pulumi.runtime import mocks

from components import image_ref

EXTERNAL_IP = "203.0.113.10"
#: The GKE backend's reserved load-balancer address and its cluster's control plane.
LB_ADDRESS = "203.0.113.40"
UPTIME_CHECK_ID = "tpu-vllm-health-4f2a"
DASHBOARD_ID = "0b7c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3"
CLUSTER_ENDPOINT = "198.51.100.7"
CLUSTER_CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUNsdXN0ZXJDQQo="
INTERNAL_IP = "10.128.0.7"
EXPIRES_AT = "2026-11-29T18:00:00Z"
# The Cloud DNS managed zones that exist in the test project: name -> DNS name.
MANAGED_ZONE = "tpu-vllm-test"
ZONE_DNS_NAME = "models.example.com."
MANAGED_ZONES = {MANAGED_ZONE: ZONE_DNS_NAME}
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyFromGuestAttributes0000000000000"
# Sentinels: values that must only ever appear where secrets may.
API_KEY_SENTINEL = "APIKEYSENTINEL0123456789abcdefghijklmnopqrstuvwxyzAB"
SSH_PRIVATE_SENTINEL = "-----BEGIN OPENSSH PRIVATE KEY-----\nSSHPRIVATESENTINEL\n-----END"
SSH_PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIClientPublicKey000000000000000000000"
CONTAINER_ID = "c0ffee" * 10 + "abcd"
CACHE_GENERATION = "img-0123456789abcdef/"
READY_STDOUT = (
    "[     3s] image present\n[   497s] ready: Application startup complete.\n"
    'TPU_VLLM_READY {"hbm": {"available_gib": 5.52, "total_gib": 15.75, "usable_gib": 14.49, '
    '"used_gib": 8.97}, "startup_seconds": 497.0, "first_answer_seconds": 1.2, "cache": {'
    '"restored": true, "files": 42, '
    '"bytes": 3221225472, "seconds": 21.5, "generation": "@PREFIX@' + CACHE_GENERATION + '"}}\n'
)


#: The last start script the mocks saw (the readiness result names its cache prefix).
_START_SCRIPTS: dict[str, str] = {}


def k8s_name(resource: str, metadata: dict[str, Any]) -> str:
    """An object's `metadata.name`: its own, or the one pulumi-kubernetes gives an object without
    one, `RESOURCE-` and 8 random characters (here fixed)."""
    return str(metadata.get("name") or f"{resource}-1f2e3d4c")


#: A pinned image as components/image_pin.py hands it to the nodes.
SERVED_IMAGE = "vllm/vllm-tpu@sha256:" + "ab" * 32


def pinned_digest(reference: str) -> str:
    """The digest the mocked registry serves for a tag: a stable stand-in per reference."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


def cloud_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    inputs = args.inputs
    if args.typ == "tls:index/privateKey:PrivateKey":
        return {
            "publicKeyOpenssh": SSH_PUBLIC_KEY + "\n",
            "privateKeyOpenssh": SSH_PRIVATE_SENTINEL,
        }
    if args.typ == "random:index/randomPassword:RandomPassword":
        return {"result": API_KEY_SENTINEL}
    if args.typ == "gcp:secretmanager/secret:Secret":
        name = f"projects/123456789/secrets/{inputs['secretId']}"
        return {"__id": name, "name": name}
    if args.typ == "gcp:secretmanager/secretVersion:SecretVersion":
        return {"name": f"{inputs['secret']}/versions/1", "secretData": inputs.get("secretData")}
    if args.typ == "command:remote:Command":
        if args.name.endswith("-start"):
            _START_SCRIPTS["create"] = str(inputs.get("create", ""))
            return {"stdout": CONTAINER_ID + "\n", "stderr": ""}
        if args.name.endswith("-ready"):
            # The generation a real node reports lies under the stack's own prefix.
            prefix = re.search(r"cache_prefix=(gs://\S+/)", str(_START_SCRIPTS.get("create", "")))
            stdout = READY_STDOUT.replace("@PREFIX@", prefix.group(1) if prefix else "gs://b/")
            return {"stdout": stdout, "stderr": ""}
        return {"stdout": "", "stderr": ""}
    if args.typ == "pulumi-python:dynamic:Resource" and "reference" in inputs:
        # The image pin's check asks the registry (components/image_pin.py); here the
        # registry's answer for a tag is a digest derived from it, one per reference.
        if inputs.get("digest"):
            return {}
        digest = pinned_digest(str(inputs["reference"]))
        return {"digest": digest, "image": image_ref.parse(str(inputs["reference"])).pinned(digest)}
    if args.typ == "pulumi-python:dynamic:Resource" and "node_create_time" in inputs:
        return {"host_key": HOST_KEY}
    if args.typ == "gcp:monitoring/uptimeCheckConfig:UptimeCheckConfig":
        # The provider's outputs: `name` projects/P/uptimeCheckConfigs/ID and `uptimeCheckId`.
        project = inputs.get("project", "test-project")
        return {"name": f"projects/{project}/uptimeCheckConfigs/{UPTIME_CHECK_ID}",
                "uptimeCheckId": UPTIME_CHECK_ID}  # fmt: skip
    if args.typ == "gcp:monitoring/dashboard:Dashboard":
        # The dashboard's id is its name, projects/NUMBER/dashboards/ID (Monitoring v1).
        return {"__id": f"projects/123456789/dashboards/{DASHBOARD_ID}"}
    if args.typ == "gcp:compute/address:Address":
        return {"address": LB_ADDRESS}
    if args.typ == "gcp:container/cluster:Cluster":
        path = f"projects/{inputs['project']}/locations/{inputs['location']}/clusters"
        return {
            "__id": f"{path}/{inputs['name']}",
            "endpoint": CLUSTER_ENDPOINT,
            "masterAuth": {"clusterCaCertificate": CLUSTER_CA},
            "masterVersion": "1.34.1-gke.1829001",
        }
    if args.typ.startswith("kubernetes:") and isinstance(inputs.get("metadata"), dict):
        # The API server gives every object a uid; pulumi-kubernetes names an object whose
        # metadata has no name (its autonaming).
        meta = inputs["metadata"]
        return {
            "metadata": {
                **meta,
                "name": k8s_name(args.name, meta),
                "uid": f"00000000-0000-4000-8000-{sum(map(ord, args.name)):012d}",
            }
        }
    if args.typ == "gcp:serviceaccount/account:Account":
        project = inputs.get("project", "test-project")
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        # As the provider names it (tests/support/standins/gcp_iam.py): the IAM API's resource name.
        return {"email": email, "name": f"projects/{project}/serviceAccounts/{email}"}
    if args.typ == "pulumi-python:dynamic:Resource" and "qr_id" in inputs:
        zone = inputs["zones"][0]
        project = inputs["project"]
        return {
            "qr_name": f"projects/{project}/locations/{zone}/queuedResources/{inputs['qr_id']}",
            "node_name": f"projects/{project}/locations/{zone}/nodes/{inputs['node_id']}",
            "zone": zone,
            "state": "ACTIVE",
            "external_ip": EXTERNAL_IP,
            "internal_ip": INTERNAL_IP,
            "create_time": "2026-11-29T14:00:00Z",
            "termination_time": EXPIRES_AT,
            "zone_errors": [],
        }
    return {}


def existing_cluster(**fields: Any) -> Callable[[mocks.MockCallArgs], dict[str, Any]]:
    """The mocks' answer to `gke.cluster`'s lookup: an existing cluster fit for the stack
    (Workload Identity and the Secret Manager add-on on), `fields` replacing or adding what
    `getCluster` returns; every other invoke gets its arguments back."""

    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:container/getCluster:getCluster":
            return {
                "name": args.args["name"],
                "location": args.args["location"],
                "project": args.args["project"],
                "endpoint": "192.0.2.55",
                "masterAuths": [{"clusterCaCertificate": "Q0E="}],
                "masterVersion": "1.34.1-gke.1829001",
                "workloadIdentityConfigs": [{"workloadPool": "test-project.svc.id.goog"}],
                "secretManagerConfigs": [{"enabled": True, "rotationConfigs": []}],
                **fields,
            }
        return dict(args.args)

    return call
