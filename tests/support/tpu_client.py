"""The TPU v2alpha1 API as the product calls it, for the tests of the loopback fake and of the
fake's nodes: the discovery client, and a flex-start v5e-1 request body.
"""

from __future__ import annotations

from typing import Any

import google.oauth2.credentials
from googleapiclient import discovery

from tests.support.fakes.tpu_api import FakeTpuApi

PROJECT = "proj"
ZONE = "us-west4-a"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
NODE_ID = "vllm-node"


def product_body(parent: str = PARENT, node_id: str = NODE_ID) -> dict[str, Any]:
    """A body of the kind the product sends for a flex-start v5e-1."""
    return {
        "provisioningModel": "FLEX_START",
        "runDuration": {"maxRunDuration": "14400s"},
        "queueingPolicy": {"validUntilDuration": "3600s"},
        "tpu": {
            "nodeSpec": [
                {
                    "parent": parent,
                    "nodeId": node_id,
                    "node": {
                        "acceleratorType": "v5litepod-1",
                        "runtimeVersion": "v2-alpha-tpuv5-lite",
                        "serviceAccount": {
                            "email": "tpu-node@proj.iam.gserviceaccount.com",
                            "scope": ["https://www.googleapis.com/auth/cloud-platform"],
                        },
                        "networkConfig": {"enableExternalIps": True},
                        "metadata": {
                            "enable-guest-attributes": "TRUE",
                            "startup-script": "#!/bin/bash\necho hello\n",
                        },
                        "labels": {"app": "vllm", "stack": "v5e1"},
                        "tags": ["vllm-server"],
                    },
                }
            ]
        },
    }


def api(fake: FakeTpuApi) -> Any:
    """The discovery client exactly as the product builds it."""
    return discovery.build(
        "tpu",
        "v2alpha1",
        static_discovery=True,
        credentials=google.oauth2.credentials.Credentials(  # type: ignore[no-untyped-call]
            token="test-token"
        ),
        client_options={"api_endpoint": fake.base_url},
    )
