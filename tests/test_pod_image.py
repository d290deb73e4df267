"""scripts/remote/pod_image.py against a loopback fake of the Kubernetes API's pod read.

The fake answers `GET /api/v1/namespaces/NS/pods/NAME` with the shape of a core/v1 Pod
(Kubernetes API reference: `status.initContainerStatuses[].imageID`, which containerd on GKE
reports as `docker.io/REPO@sha256:HEX`), and checks the bearer token arrives as a header.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
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


class FakeApi(BaseHTTPRequestHandler):
    pods: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        pod = self.pods.get(self.path)
        self.send_response(200 if pod else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(pod or {"kind": "Status", "code": 404}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def run_tool(api: str, account: Path, name: str = "vllm-abc") -> subprocess.CompletedProcess[str]:
    env = {
        "KUBERNETES_API": api,
        "SERVICE_ACCOUNT_DIR": str(account),
        "POD_NAMESPACE": "tpu-vllm-x",
        "POD_NAME": name,
        "CONTAINER_NAME": "xla-cache-restore",
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
