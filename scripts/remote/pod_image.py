"""Runs in the GKE server pod's init container: print the image digest the kubelet pulled.

Why: the compile cache's generation is the image digest (components/compile_cache.py), because a
tag like `nightly` moves. A pod has no docker to ask (the VM path runs `docker image inspect`);
its own status names what it runs: `status.initContainerStatuses[].imageID`, e.g.
`docker.io/vllm/vllm-tpu@sha256:...` (Kubernetes API `GET /api/v1/namespaces/NS/pods/NAME`,
allowed by the Role `tpu-vllm-pod-reader`). The token is read from the pod's service-account
file into a request header, never argv or env. Prints nothing when it cannot tell, and exits 0:
the restore then starts cold. KUBERNETES_API overrides the endpoint (tests). Stdlib only.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request
from typing import Any

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def image_id(pod: dict[str, Any], container: str) -> str:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    for status in statuses:
        found = str(status.get("imageID") or "")
        if status.get("name") == container and "@sha256:" in found:
            return found
    return ""


def main() -> int:
    try:
        namespace, name = os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]
        container = os.environ.get("CONTAINER_NAME", "xla-cache-restore")
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        api = os.environ.get("KUBERNETES_API") or (
            f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        )
        account = os.environ.get("SERVICE_ACCOUNT_DIR", ACCOUNT)
        with open(os.path.join(account, "token"), encoding="utf-8") as handle:
            token = handle.read().strip()
        context = None
        if api.startswith("https://"):
            context = ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))
        request = urllib.request.Request(  # noqa: S310 - http(s) to the Kubernetes API only
            f"{api}/api/v1/namespaces/{namespace}/pods/{name}",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=20) as answer:  # noqa: S310
            found = image_id(json.load(answer), container)
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        print(f"pod-image: cannot read this pod's image digest ({error})", file=sys.stderr)
        return 0
    if not found:
        print(f"pod-image: no digest for {container} in the pod status yet", file=sys.stderr)
    print(found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
