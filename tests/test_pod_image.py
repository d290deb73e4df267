"""scripts/remote/pod_image.py against a loopback fake of the Kubernetes API's pod read.

The fake answers `GET /api/v1/namespaces/NS/pods/NAME` with the shape of a core/v1 Pod
(Kubernetes API reference: `status.initContainerStatuses[].imageID`, which containerd on GKE
reports as `docker.io/REPO@sha256:HEX`), and checks the bearer token arrives as a header.
`FakeApi.unpublished_for = N`: the first N reads show the init container as the kubelet first
publishes it, "waiting: PodInitializing" with an empty `imageID` (kubernetes
pkg/kubelet/kubelet_pods.go `convertToAPIContainerStatuses`: the default status has no ImageID;
`ImageID: cs.ImageRef` only once the runtime reports the container).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from components.compile_cache import generation_name
from tests.pulumi_program import ROOT

TOOL = ROOT / "scripts" / "remote" / "pod_image.py"
TOKEN = "PODTOKENSENTINEL"
DIGEST = "docker.io/vllm/vllm-tpu@sha256:" + "ab12" * 16


def unpublished(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the kubelet first reports it: its containers waiting, without imageID."""
    early = copy.deepcopy(pod)
    for status in (early.get("status") or {}).get("initContainerStatuses") or []:
        status.update(imageID="", containerID="", state={"waiting": {"reason": "PodInitializing"}})
    return early


class FakeApi(BaseHTTPRequestHandler):
    pods: ClassVar[dict[str, Any]] = {}
    unpublished_for: ClassVar[int] = 0
    reads: ClassVar[int] = 0

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        pod = self.pods.get(self.path)
        FakeApi.reads += 1
        if pod and FakeApi.reads <= FakeApi.unpublished_for:
            pod = unpublished(pod)
        self.send_response(200 if pod else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(pod or {"kind": "Status", "code": 404}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    FakeApi.unpublished_for = FakeApi.reads = 0
    server = HTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def run_tool(
    api: str, account: Path, name: str = "vllm-abc", wait: float = 2.0
) -> subprocess.CompletedProcess[str]:
    env = {
        "KUBERNETES_API": api,
        "SERVICE_ACCOUNT_DIR": str(account),
        "POD_NAMESPACE": "tpu-vllm-x",
        "POD_NAME": name,
        "CONTAINER_NAME": "xla-cache-restore",
        "IMAGE_ID_WAIT_SECONDS": str(wait),
    }
    return subprocess.run(
        [sys.executable, str(TOOL)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_prints_the_digest_the_kubelet_pulled(api: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    FakeApi.pods = {
        "/api/v1/namespaces/tpu-vllm-x/pods/vllm-abc": {
            "kind": "Pod",
            "status": {
                "initContainerStatuses": [
                    {"name": "other", "imageID": "docker.io/busybox@sha256:" + "00" * 32},
                    {"name": "xla-cache-restore", "imageID": DIGEST},
                ]
            },
        }
    }
    done = run_tool(api, tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == DIGEST
    # The generation is the VM path's for the same digest (docker's RepoDigests name).
    assert generation_name(done.stdout.strip()) == generation_name(
        "vllm/vllm-tpu@sha256:" + "ab12" * 16
    )
    assert TOKEN not in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["missing-pod", "vllm-abc"])
def test_no_digest_prints_nothing_and_never_fails(api: str, tmp_path: Path, name: str) -> None:
    (tmp_path / "token").write_text(TOKEN)
    FakeApi.pods = {"/api/v1/namespaces/tpu-vllm-x/pods/vllm-abc": {"status": {}}}
    done = run_tool(api, tmp_path, name)
    assert done.returncode == 0
    assert done.stdout.strip() == ""
    assert "pod-image:" in done.stderr
    assert TOKEN not in done.stderr


def test_waits_for_the_digest_the_kubelet_publishes_late(api: str, tmp_path: Path) -> None:
    """The first reads show the init container without imageID (the kubelet fills it in
    asynchronously): the tool keeps reading until it appears, within its bound."""
    (tmp_path / "token").write_text(TOKEN)
    FakeApi.pods = {
        "/api/v1/namespaces/tpu-vllm-x/pods/vllm-abc": {
            "kind": "Pod",
            "status": {"initContainerStatuses": [{"name": "xla-cache-restore", "imageID": DIGEST}]},
        }
    }
    FakeApi.unpublished_for = 3
    done = run_tool(api, tmp_path, wait=30)
    assert done.returncode == 0
    assert done.stdout.strip() == DIGEST, done.stderr
    assert FakeApi.reads == 4


def test_a_digest_that_never_comes_is_bounded_and_the_reason_logged(
    api: str, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    FakeApi.pods = {
        "/api/v1/namespaces/tpu-vllm-x/pods/vllm-abc": {
            "kind": "Pod",
            "status": {"initContainerStatuses": [{"name": "xla-cache-restore", "imageID": DIGEST}]},
        }
    }
    FakeApi.unpublished_for = 10**6
    began = time.monotonic()
    done = run_tool(api, tmp_path, wait=3.0)
    assert time.monotonic() - began < 15
    assert done.returncode == 0 and done.stdout.strip() == ""
    assert "no imageID for xla-cache-restore in the pod status yet after 3s" in done.stderr
    assert FakeApi.reads >= 2
