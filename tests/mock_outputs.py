"""What the cloud would answer for each resource type, for programs run under mocks.

Mocks echo inputs back as outputs; these add the outputs a real `pulumi up` would produce
(a service account's email, the queued resource's zone and IPs), so exports and the values
that flow between components can be asserted.
"""

from __future__ import annotations

from typing import Any

from pulumi.runtime import mocks

EXTERNAL_IP = "203.0.113.10"
INTERNAL_IP = "10.128.0.7"
EXPIRES_AT = "2026-11-29T18:00:00Z"


def cloud_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    inputs = args.inputs
    if args.typ == "gcp:serviceaccount/account:Account":
        project = inputs.get("project", "test-project")
        return {"email": f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"}
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
