"""The GKE pods' compile cache, run for real: the init container's restore and the sidecar's save.

The scripts are the ConfigMap's (what the program registers for `v6e4-gke`), run with bash and
the env of their containers in the Deployment, as the kubelet would start them, with the
emptyDir mounts replaced by temporary directories. Around them: the loopback fakes of the Cloud
Storage JSON API and the metadata server (tests/support/fakes/gcs_api.py, metadata_server.py; on GKE
the metadata server hands out the Workload Identity token at the same path). The generation is
the pinned image's (components/image_pin.py), which the containers are given. The tool is the
VM path's, with its
final API (scripts/remote/xla_cache.py `fetch`, `install`, `save`), so a GKE replica restores
what another replica (or a VM of the same key and image) saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
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
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.mock_outputs import pinned_digest
from tests.support.privileged import skip_or_fail
from tests.support.pulumi_program import ProgramRun, run_program
from tests.support.xla_cache_tool import load_tool

STACK = "v6e4-gke"
NAMESPACE = "tpu-vllm-v6e4-gke"
#: The pinned image the mocked registry gives `vllm/vllm-tpu:nightly`
#: (tests/support/mock_outputs.py); a VM of the same stack key runs the same NAME@sha256 and so
#: shares the generation.
PINNED = f"vllm/vllm-tpu@{pinned_digest('vllm/vllm-tpu:nightly')}"
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
    health = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    try:
        yield {
            "root": root,
            "store": GcsStore(str(root)),
            "gcs": gcs,
            "metadata": fake_metadata,
            "health_port": health.server_port,
        }
    finally:
        gcs.stop()
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
        for file, text in run.named("vllm-scripts").inputs["data"].items():
            (self.tools / file).write_text(text)
        self.work = self.tmp / "xla-cache-work"  # emptyDir xla-cache-work
        self.cache = self.tmp / "vllm-cache" / "xla_cache"  # emptyDir vllm-cache, as mounted
        self.found = containers(run)
        self.cloud = cloud
        self.base = {
            "PATH": os.environ["PATH"],
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

    def restore(self, **extra: str) -> dict[str, Any]:
        done = subprocess.run(
            ["bash", str(self.tools / "cache_restore.sh")],
            env=self.env("xla-cache-restore", **extra),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr  # an init container that fails blocks the pod
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
            first = dict(json.loads(summary.read_text()))  # the save after ready
            time.sleep(0.3)
            assert proc.poll() is None, "the sidecar exited: Kubernetes would restart it"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
        self.save_log = stderr
        return first


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
    generation = f"{prefix}{generation_name(PINNED)}/"
    assert saved["generation"] == generation
    key = generation[len(f"gs://{bucket}/") :]
    assert {n[len(key) :] for n in cloud["store"].names(bucket, key)} >= set(ENTRIES)

    second = Pod(program, cloud, tmp_path, "vllm-7d9f-bbbbb")
    warm = second.restore()
    assert warm["restored"] is True, warm
    assert (warm["files"], warm["generation"]) == (len(ENTRIES), generation)
    for name, data in ENTRIES.items():
        assert (second.cache / name).read_bytes() == data
    # Stamped whatever JAX's eviction setting (read only once the image is pulled): JAX reads
    # a -atime stamp per entry when it evicts, and ignores them when it does not.
    assert len(list(second.cache.glob("*-atime"))) == len(ENTRIES)


def seed_generation(prefix: str, store: GcsStore, digest: str = PINNED) -> str:
    """What a replica's save leaves: the entries, then MANIFEST.json, then LATEST."""
    bucket = bucket_of(prefix)
    store.create_bucket(bucket)
    generation = generation_name(digest)
    key = prefix[len(f"gs://{bucket}/") :]
    manifest = {}
    for name, data in ENTRIES.items():
        store.put(bucket, f"{key}{generation}/{name}", data, mtime=1_700_000_000)
        manifest[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    store.put(bucket, f"{key}{generation}/MANIFEST.json", json.dumps({"files": manifest}).encode())
    store.put(bucket, f"{key}LATEST", generation.encode())
    return f"{prefix}{generation}/"


def test_the_first_token_fetch_is_retried_while_the_metadata_server_starts(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """The GKE metadata server does not answer in a pod's first seconds: the tool retries
    the token fetch (bounded backoff) and says so, instead of starting cold."""
    seed_generation(program.outputs["compile_cache"], cloud["store"])
    cloud["metadata"].unavailable_for = 3
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-eeeee")
    result = pod.restore()
    assert result["restored"] is True, (result, pod.restore_log)
    assert cloud["metadata"].refused == 3
    assert "the metadata server gave no token yet (HTTP 503); retrying" in pod.restore_log


@pytest.mark.parametrize(
    ("knob", "logged"),
    [
        # googleapis/google-auth-library-python#745: 404 `Not Found` while the server starts.
        ("not_found_for", "(HTTP 404); retrying"),
        # The connection closed with no answer at all.
        ("closed_for", "Remote end closed connection without response"),
    ],
)
def test_a_starting_metadata_servers_404_and_closed_connections_are_retried_in_a_pod(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path, knob: str, logged: str
) -> None:
    """In a pod the restore's token fetch (`--in-pod`) retries, within its bound, what a GKE
    metadata server that is not ready yet answers, instead of starting cold."""
    generation = seed_generation(program.outputs["compile_cache"], cloud["store"])
    setattr(cloud["metadata"], knob, 3)
    pod = Pod(program, cloud, tmp_path, f"vllm-7d9f-{knob[:5]}")
    result = pod.restore()
    assert result["restored"] is True, (result, pod.restore_log)
    assert result["generation"] == generation
    assert cloud["metadata"].refused == 3
    assert logged in pod.restore_log, pod.restore_log


def test_refused_connections_to_a_starting_metadata_server_are_retried(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """googleapis/google-auth-library-python#1261: the GKE metadata server refuses connections
    in a pod's first seconds. Nothing listens on its port for 2 s here (a refused TCP connect,
    ECONNREFUSED); the restore keeps asking and restores."""
    generation = seed_generation(program.outputs["compile_cache"], cloud["store"])
    late = FakeMetadataServer(cloud["metadata"].access_token).start(refuse_for=2.0)
    try:
        pod = Pod(program, cloud, tmp_path, "vllm-7d9f-refus")
        result = pod.restore(GCE_METADATA_HOST=late.host)
    finally:
        late.stop()
    assert result["restored"] is True, (result, pod.restore_log)
    assert result["generation"] == generation
    assert "Connection refused" in pod.restore_log, pod.restore_log
    assert late.requests  # it was this server that answered in the end


def test_a_token_refusal_is_final_on_a_vm_and_explained_when_it_lasts_in_a_pod(
    fake_metadata: FakeMetadataServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a VM a 404 means no service account: asked once, not for a minute. In a pod a 404
    that lasts the whole bound names the likely cause (no Workload Identity binding)."""
    tool = load_tool()
    monkeypatch.setenv("GCE_METADATA_HOST", fake_metadata.host)
    fake_metadata.not_found_for = 10**6
    with pytest.raises(RuntimeError, match="refused a token: HTTP 404"):
        tool.JsonApi()._fetch_token(tool.Deadline(60))
    assert fake_metadata.refused == 1
    monkeypatch.setattr(tool.api, "TOKEN_RETRY_SECONDS", 1.0)
    monkeypatch.setattr(tool.JsonApi, "in_pod", True)
    with pytest.raises(RuntimeError, match=r"attempts \(HTTP 404\); .*Workload Identity"):
        tool.JsonApi()._fetch_token(tool.Deadline(60))
    assert fake_metadata.refused > 2


def test_a_pod_restores_from_the_pinned_digest_without_docker_or_the_kubelet(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """The init container is given the pinned image (SERVER_IMAGE = NAME@sha256:...): the
    generation comes from it, so the restore reads no pod status and never calls docker (a pod
    has neither), and a generation saved for that digest is restored."""
    generation = seed_generation(program.outputs["compile_cache"], cloud["store"])
    restore = containers(program)["xla-cache-restore"]
    assert env_of(restore)["SERVER_IMAGE"] == restore["image"] == program.outputs["image"]
    shims = tmp_path / "shims"
    shims.mkdir()
    calls = tmp_path / "calls.log"
    for tool in ("docker", "sudo", "kubectl"):
        shim = shims / tool
        shim.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        shim.chmod(0o755)
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-fffff")
    result = pod.restore(PATH=f"{shims}:{os.environ['PATH']}")
    assert not calls.exists(), calls.read_text()
    assert result["restored"] is True, pod.restore_log
    assert result["generation"] == generation


def test_a_tag_is_never_a_generation_and_the_pod_still_starts(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """Were the container given a tag (it never is: the image is pinned), the restore refuses
    to guess a generation from it, starts cold, and the init container still succeeds."""
    seed_generation(program.outputs["compile_cache"], cloud["store"])
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-hhhhh")
    result = pod.restore(SERVER_IMAGE="vllm/vllm-tpu:nightly")
    assert result["restored"] is False
    assert "is not pinned" in result["reason"]


def test_atime_stamps_are_written_when_jax_eviction_is_configured(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """With JAX_COMPILATION_CACHE_MAX_SIZE set in the image, JAX evicts and reads a -atime stamp
    for every entry (jax/_src/lru_cache.py `_evict_if_needed`): the restore writes them then."""
    seed_generation(program.outputs["compile_cache"], cloud["store"])
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-ggggg")
    result = pod.restore(JAX_COMPILATION_CACHE_MAX_SIZE=str(10**9))
    assert result["restored"] is True, pod.restore_log
    for name in ENTRIES:
        assert (pod.cache / name.replace("-cache", "-atime")).stat().st_size == 8


def pid1_of(outer: subprocess.Popen[bytes]) -> int:
    """The host pid of the new namespace's PID 1: `unshare --fork`'s only child."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no child")


@pytest.mark.parametrize("phase", ["waiting for the server", "idle after the save"])
def test_the_save_sidecar_as_pid_1_exits_promptly_on_sigterm(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    """The sidecar's script is its container's PID 1, which gets only the signals it handles
    (kill(2), pid_namespaces(7)): run it as PID 1 of a new PID namespace and send SIGTERM from
    outside, as the kubelet does on a pod deletion. It must exit within seconds, not at the end
    of the grace period; after ready, with a last save first, which carries an entry JAX wrote
    after the save at ready."""
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        skip_or_fail(f"cannot create a PID namespace here: {probe.stderr.decode().strip()}")
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-hhhhh")
    if phase == "idle after the save":
        seed_generation(program.outputs["compile_cache"], cloud["store"])
        assert pod.restore()["restored"] is True
        port = cloud["health_port"]
    else:
        with socket.socket() as sock:  # a port nothing listens on: the server is not up
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "bash", str(pod.tools / "cache_save.sh")],
        env=pod.env("xla-cache-save", SERVER_PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        init = pid1_of(outer)
        late = {f"jit_late-{'1' * 64}-cache": os.urandom(3000)}
        if phase == "idle after the save":
            deadline = time.monotonic() + 60
            while not (pod.work / "save.json").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert json.loads((pod.work / "save.json").read_text())["ok"] is True
            for name, data in late.items():  # a request's new shape, compiled after ready
                (pod.cache / name).write_bytes(data)
            time.sleep(1.2)  # complete: older than the save's settle pause
        time.sleep(1.0)  # into its wait
        assert outer.poll() is None
        sent = time.monotonic()
        os.kill(init, signal.SIGTERM)
        outer.wait(timeout=5)  # the grace period is 30 s: "promptly" is well within it
        assert time.monotonic() - sent < 5
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()
    stderr = outer.stderr.read().decode() if outer.stderr else ""
    assert outer.returncode == 0, stderr
    assert "xla-cache-save: SIGTERM; exiting" in stderr
    if phase == "idle after the save":
        assert "SIGTERM: saving what is new one last time" in stderr
        last = json.loads((pod.work / "save.json").read_text())
        assert last["ok"] is True and last["why"] == "SIGTERM" and last["uploaded"] == 1, last
        prefix = program.outputs["compile_cache"]
        key = f"{prefix}{generation_name(PINNED)}/"[len(f"gs://{bucket_of(prefix)}/") :]
        for name, data in late.items():
            assert cloud["store"].get(bucket_of(prefix), key + name) == data


def test_the_sidecar_saves_again_every_save_interval(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """After the save at ready the sidecar keeps saving, every CACHE_SAVE_EVERY seconds
    (`cache.saveInterval`, here shortened): an entry JAX writes later reaches the bucket and the
    manifest while the pod runs on, without a restart."""
    generation = seed_generation(program.outputs["compile_cache"], cloud["store"])
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-iiiii")
    assert pod.restore()["restored"] is True
    env = pod.env("xla-cache-save", SERVER_PORT=str(cloud["health_port"]), CACHE_SAVE_EVERY="1")
    proc = subprocess.Popen(
        ["bash", str(pod.tools / "cache_save.sh")], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    bucket = bucket_of(generation)
    key = generation[len(f"gs://{bucket}/") :]
    late = f"jit_late-{'2' * 64}-cache"
    try:
        deadline = time.monotonic() + 60
        while not (pod.work / "save.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        (pod.cache / late).write_bytes(os.urandom(5000))
        manifest = {}
        while time.monotonic() < deadline:
            manifest = json.loads(cloud["store"].get(bucket, key + "MANIFEST.json"))["files"]
            if late in manifest:
                break
            time.sleep(0.2)
        assert late in manifest, "no later save carried the new entry"
        assert cloud["store"].get(bucket, key + late) == (pod.cache / late).read_bytes()
        # save.json is written after the save's manifest: wait for it too, not just read it.
        why = ""
        while time.monotonic() < deadline:
            why = json.loads((pod.work / "save.json").read_text())["why"]
            if why == "periodic":
                break
            time.sleep(0.1)
        assert why == "periodic"
        assert proc.poll() is None, "the sidecar exited: Kubernetes would restart it"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)


def test_a_sigterm_before_ready_saves_what_the_start_compiled_so_far(
    program: ProgramRun, cloud: dict[str, Any], tmp_path: Path
) -> None:
    """A pod deleted during its cold start (an update, a recycled node) has compiled part of
    its programs; each entry is a whole program. The sidecar, still waiting for /health, saves
    them on SIGTERM, so the next replica starts from them."""
    prefix = program.outputs["compile_cache"]
    bucket = bucket_of(prefix)
    cloud["store"].create_bucket(bucket)
    pod = Pod(program, cloud, tmp_path, "vllm-7d9f-jjjjj")
    assert pod.restore()["restored"] is False
    pod.cache.mkdir(parents=True, exist_ok=True)
    for name, data in ENTRIES.items():
        (pod.cache / name).write_bytes(data)
    time.sleep(1.2)  # complete: older than the save's settle pause
    with socket.socket() as sock:  # a port nothing listens on: the server is not up
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        ["bash", str(pod.tools / "cache_save.sh")],
        env=pod.env("xla-cache-save", SERVER_PORT=str(port)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    time.sleep(1.0)  # into its wait for the server
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "SIGTERM before the server was ready; saving what it compiled so far" in stderr
    saved = json.loads((pod.work / "save.json").read_text())
    assert saved["ok"] is True and saved["uploaded"] == len(ENTRIES), saved
    warm = Pod(program, cloud, tmp_path, "vllm-7d9f-kkkkk").restore()
    assert warm["restored"] is True and warm["files"] == len(ENTRIES), warm


def test_the_last_save_fits_in_the_pods_grace_period(program: ProgramRun) -> None:
    """The kubelet SIGKILLs what still runs when the grace period ends: the sidecar's last
    save is bounded well inside it, and its period is `cache.saveInterval`'s."""
    pod = program.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    env = env_of(containers(program)["xla-cache-save"])
    assert 0 < int(env["CACHE_STOP_TIMEOUT"]) < int(pod["terminationGracePeriodSeconds"]) - 5
    assert env["CACHE_SAVE_EVERY"] == "300"  # the default, 5m
    other = run_program(STACK, {"tpu-vllm:cache.saveInterval": "90s"})
    assert env_of(containers(other)["xla-cache-save"])["CACHE_SAVE_EVERY"] == "90"
