"""Runs in the GKE server pod's init container: print the image digest the kubelet pulled.

Why: the compile cache's generation is the image digest (components/compile_cache.py), because a
tag like `nightly` moves. A pod has no docker to ask (the VM path runs `docker image inspect`);
its own status names what it runs: `status.initContainerStatuses[].imageID`, e.g.
`docker.io/vllm/vllm-tpu@sha256:...` (Kubernetes API `GET /api/v1/namespaces/NS/pods/NAME`,
allowed by the Role `tpu-vllm-pod-reader`).

The kubelet publishes that field late: it builds each container's status as "waiting,
PodInitializing" without an `imageID`, and sets `imageID` (the runtime's image ref) only once
the runtime reports the container; the status manager then writes it to the API server
asynchronously (kubernetes pkg/kubelet/kubelet_pods.go `convertToAPIContainerStatuses`,
pkg/kubelet/status/status_manager.go). So a read in the container's first moments can find no
digest: this waits for it, polling, bounded by IMAGE_ID_WAIT_SECONDS (default 90), with a line
of progress every 10 s, and retries connection errors and 5xx answers in that time.

The token is read from the pod's service-account file into a request header, never argv or
env. Prints nothing when it cannot tell (and says why on stderr), and exits 0: the restore then
starts cold. KUBERNETES_API overrides the endpoint (tests). Stdlib only.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_WAIT_SECONDS = 90.0
POLL_SECONDS = 1.0
PROGRESS_SECONDS = 10.0


def log(message: str) -> None:
    print(f"pod-image: {message}", file=sys.stderr, flush=True)


def image_id(pod: dict[str, Any], container: str) -> str:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    for status in statuses:
        found = str(status.get("imageID") or "")
        if status.get("name") == container and "@sha256:" in found:
            return found
    return ""


class PodReader:
    """`GET` this pod from the Kubernetes API with the pod's own service-account token."""

    def __init__(self) -> None:
        namespace, name = os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        api = os.environ.get("KUBERNETES_API") or (
            f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        )
        account = os.environ.get("SERVICE_ACCOUNT_DIR", ACCOUNT)
        with open(os.path.join(account, "token"), encoding="utf-8") as handle:
            self._token = handle.read().strip()
        self.context = None
        if api.startswith("https://"):
            self.context = ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))
        self.url = f"{api}/api/v1/namespaces/{namespace}/pods/{name}"

    def read(self) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - http(s) to the Kubernetes API only
            self.url,
            headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.context, timeout=20) as answer:  # noqa: S310
            return dict(json.load(answer))


def wait_for_digest(reader: PodReader, container: str, wait: float) -> tuple[str, str]:
    """(digest, "") once the status names one; ("", why not) when `wait` runs out or the API
    refuses (401/403/404 are not retried: no RBAC, or not this pod)."""
    started = time.monotonic()
    reported = started
    problem = "no imageID in the pod status yet"
    while True:
        try:
            found = image_id(reader.read(), container)
            if found:
                waited = time.monotonic() - started
                if waited >= 1.0:
                    log(f"the kubelet published the digest after {waited:.0f}s")
                return found, ""
            problem = f"no imageID for {container} in the pod status yet"
        except urllib.error.HTTPError as error:
            if error.code < 500:
                return "", f"the Kubernetes API answered HTTP {error.code} for this pod"
            problem = f"the Kubernetes API answered HTTP {error.code}"
        except (urllib.error.URLError, OSError, ValueError) as error:
            problem = f"cannot reach the Kubernetes API ({getattr(error, 'reason', error)})"
        now = time.monotonic()
        if now - started >= wait:
            return "", f"{problem} after {wait:.0f}s (the kubelet publishes it asynchronously)"
        if now - reported >= PROGRESS_SECONDS:
            log(f"waiting for this pod's image digest: {problem} ({now - started:.0f}/{wait:.0f}s)")
            reported = now
        time.sleep(min(POLL_SECONDS, max(wait - (now - started), 0.0)))


def main() -> int:
    container = os.environ.get("CONTAINER_NAME", "xla-cache-restore")
    try:
        wait = float(os.environ.get("IMAGE_ID_WAIT_SECONDS") or DEFAULT_WAIT_SECONDS)
        found, why = wait_for_digest(PodReader(), container, wait)
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        found, why = "", f"cannot read this pod's image digest ({error})"
    if not found:
        log(f"{why}; the compile cache starts cold")
    print(found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
