"""The GKE pods' compile cache, run for real: the init container's restore and the sidecar's save.

The scripts are the ConfigMap's (what the program registers for `v6e4-gke`), run with bash and
the env of their containers in the Deployment, as the kubelet would start them, with the
emptyDir mounts replaced by temporary directories. Around them: the loopback fakes of the Cloud
Storage JSON API and the metadata server (tests/fakes/gcs_api.py, metadata_server.py; on GKE
the metadata server hands out the Workload Identity token at the same path), and of the pod read
of the Kubernetes API (tests/test_pod_image.py's FakeApi). The tool is the VM path's, with its
final API (scripts/remote/xla_cache.py `fetch`, `install`, `save`), so a GKE replica restores
what another replica (or a VM of the same key and image) saved.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from components.compile_cache import generation_name
from tests.fakes.gcs_api import FakeGcsApi
from tests.fakes.gcs_store import GcsStore
from tests.fakes.metadata_server import FakeMetadataServer
from tests.pulumi_program import ProgramRun, run_program
from tests.test_pod_image import TOKEN, FakeApi

STACK = "v6e4-gke"
NAMESPACE = "tpu-vllm-v6e4-gke"
HEX = "cd34" * 16
#: What containerd on GKE reports as the init container's imageID.
POD_DIGEST = f"docker.io/vllm/vllm-tpu@sha256:{HEX}"
#: The same image as `docker image inspect` names it on a TPU VM (RepoDigests).
VM_DIGEST = f"vllm/vllm-tpu@sha256:{HEX}"
ENTRIES = {f"jit_step_{i:02d}-{'0' * 8}{i:02d}-cache": os.urandom(2048 + i) for i in range(6)}


class Health(BaseHTTPRequestHandler):
    """The server container's /health, once it is up (vLLM answers nothing before that)."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def program() -> ProgramRun:
    return run_program(STACK)


@pytest.fixture
def cloud(fake_metadata: FakeMetadataServer) -> Iterator[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="tpu-vllm-gke-gcs-"))
    gcs = FakeGcsApi(root, token=fake_metadata.access_token).start()
    kube = HTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=kube.serve_forever, daemon=True).start()
    health = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    try:
        yield {
            "root": root,
            "store": GcsStore(str(root)),
            "gcs": gcs,
            "metadata": fake_metadata,
            "kube": f"http://127.0.0.1:{kube.server_port}",
            "health_port": health.server_port,
        }
    finally:
        gcs.stop()
        kube.shutdown()
        health.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def containers(run: ProgramRun) -> dict[str, dict[str, Any]]:
    pod = run.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}


class Pod:
    """One replica's restore and save, with its emptyDirs and service-account files."""

    def __init__(self, run: ProgramRun, cloud: dict[str, Any], tmp: Path, name: str) -> None:
        self.tmp = tmp / name
        self.tools = self.tmp / "tpu-vllm"
        self.tools.mkdir(parents=True)
        for file, text in run.one("kubernetes:core/v1:ConfigMap").inputs["data"].items():
            (self.tools / file).write_text(text)
        account = self.tmp / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(TOKEN)
        self.work = self.tmp / "xla-cache-work"  # emptyDir xla-cache-work
        self.cache = self.tmp / "vllm-cache" / "xla_cache"  # emptyDir vllm-cache, as mounted
        self.found = containers(run)
        self.cloud = cloud
        FakeApi.pods[f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"] = {
            "kind": "Pod",
            "status": {
                "initContainerStatuses": [{"name": "xla-cache-restore", "imageID": POD_DIGEST}]
            },
        }
        self.base = {
            "PATH": os.environ["PATH"],
            "POD_NAME": name,
            "POD_NAMESPACE": NAMESPACE,
            "KUBERNETES_API": cloud["kube"],
            "SERVICE_ACCOUNT_DIR": str(account),
            "TPU_VLLM_CACHE_VIA": "api",  # the serving image has no gcloud
            "STORAGE_API_ENDPOINT": cloud["gcs"].url,
            "GCE_METADATA_HOST": cloud["metadata"].host,
        }

    def env(self, container: str, **extra: str) -> dict[str, str]:
        env = env_of(self.found[container])
        assert env["TOOLS"] == "/tpu-vllm" and env["CACHE_DIR"] == "/root/.cache/vllm/xla_cache"
        # The mounts, where this test keeps them.
        env.update(TOOLS=str(self.tools), CACHE_WORK=str(self.work), CACHE_DIR=str(self.cache))
        return {**self.base, **env, **extra}

    def restore(self) -> dict[str, Any]:
        done = subprocess.run(
            ["bash", str(self.tools / "cache_restore.sh")],
            env=self.env("xla-cache-restore"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr  # an init container that fails blocks the pod
        assert TOKEN not in done.stdout + done.stderr
        self.restore_log = done.stderr
        return dict(json.loads((self.work / "result.json").read_text()))

    def save(self) -> dict[str, Any]:
        """The sidecar: waits for /health, saves, then idles (stopped here once it saved)."""
        env = self.env("xla-cache-save", SERVER_PORT=str(self.cloud["health_port"]))
        proc = subprocess.Popen(
            ["bash", str(self.tools / "cache_save.sh")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        summary = self.work / "save.json"
        try:
            deadline = time.monotonic() + 120
            while not summary.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.3)
            assert proc.poll() is None, "the sidecar exited: Kubernetes would restart it"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            _, stderr = proc.communicate(timeout=10)
        assert TOKEN not in stderr
        return dict(json.loads(summary.read_text()))


def bucket_of(prefix: str) -> str:
    return prefix[len("gs://") :].split("/", 1)[0]


def test_a_cold_replica_saves_and_the_next_restores_the_same_generation(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    prefix = program.outputs["compile_cache"]
    bucket = bucket_of(prefix)
    cloud["store"].create_bucket(bucket)

    first = Pod(program, cloud, tmp_path, "vllm-7d9f-aaaaa")
    cold = first.restore()
    assert cold["restored"] is False
    assert "no cache for this image" in cold["reason"]
    # The server compiles: JAX writes its entries into the cache directory.
    first.cache.mkdir(parents=True, exist_ok=True)
    for name, data in ENTRIES.items():
        (first.cache / name).write_bytes(data)
    time.sleep(1.2)  # older than the tool's settle pause: complete files
    saved = first.save()
    assert saved["ok"] is True, saved
    assert saved["uploaded"] == len(ENTRIES)
    # The generation is the VM path's for the same image: a VM of this key shares it.
    generation = f"{prefix}{generation_name(VM_DIGEST)}/"
    assert saved["generation"] == generation
    key = generation[len(f"gs://{bucket}/") :]
    assert {n[len(key) :] for n in cloud["store"].names(bucket, key)} >= set(ENTRIES)

    second = Pod(program, cloud, tmp_path, "vllm-7d9f-bbbbb")
    warm = second.restore()
    assert warm["restored"] is True, warm
    assert (warm["files"], warm["generation"]) == (len(ENTRIES), generation)
    for name, data in ENTRIES.items():
        assert (second.cache / name).read_bytes() == data
        # JAX's LRU eviction needs an -atime stamp beside every entry (the final tool's install).
        assert (second.cache / name.replace("-cache", "-atime")).stat().st_size == 8


def test_no_digest_means_a_cold_start_never_a_failed_pod(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """The pod's status names no digest yet (or the API refuses): the tag is not a generation
    (it moves), so the restore starts cold and the init container still succeeds."""
    cloud["store"].create_bucket(bucket_of(program.outputs["compile_cache"]))
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-ccccc")
    FakeApi.pods.clear()
    result = pod.restore()
    assert result["restored"] is False
    assert "pod-image:" in pod.restore_log
