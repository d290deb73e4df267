"""Sentinel secrets through the real rendered commands, over real SSH, with fakes on loopback.

The HF token and API key live only in the Secret Manager fake. The node's fetch command, the
server start and the readiness check run over SSH against a real sshd on 127.0.0.1, with a fake
metadata server for the VM's identity and a fake `docker` that records argv and environment.
Throughout, a watcher scans `/proc/*/cmdline` and `/proc/*/environ` for either sentinel.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost, SshHostFactory
from tests.support.remote_stack import FETCH, READY, START, commands, node_with_secrets, on_host

ENTRYPOINT = Path(__file__).resolve().parents[2] / "scripts" / "remote" / "vllm_entrypoint.sh"
HF_SENTINEL = "hf_SENTINELtokenNEVERshown0123456789"
API_SENTINEL = "APIKEYsentinelNEVERshown0123456789abcdef"
SENTINELS = (HF_SENTINEL.encode(), API_SENTINEL.encode())


class ProcWatcher:
    """Scans every process's argv and environment until stopped; records any sentinel hit."""

    def __init__(self, sentinels: tuple[bytes, ...] = SENTINELS) -> None:
        self.sentinels = sentinels
        self.hits: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                for part in ("cmdline", "environ"):
                    try:
                        data = Path(f"/proc/{pid}/{part}").read_bytes()
                    except OSError:
                        continue
                    for sentinel in self.sentinels:
                        if sentinel in data:
                            self.hits.append(f"pid {pid} {part}: {data[:200]!r}")
            self.scans += 1
            self._stop.wait(0.005)

    def __enter__(self) -> ProcWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(params=["gcloud", "curl"])
def vm(
    request: pytest.FixtureRequest,
    ssh_host_factory: SshHostFactory,
    fake_secret_manager: FakeSecretManager,
    fake_metadata: FakeMetadataServer,
) -> Iterator[tuple[SshHost, str]]:
    """An SSH "TPU VM" whose identity can read the two sentinel secrets, fetching them with
    gcloud (the VM image's, faked) or with curl against the metadata and REST endpoints."""
    yield node_with_secrets(
        ssh_host_factory,
        fake_secret_manager,
        fake_metadata,
        hf_token=HF_SENTINEL.encode(),
        api_key=API_SENTINEL.encode(),
        env={"TPU_VLLM_SECRETS_VIA": request.param},
    )


def assert_clean(text: bytes | str, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    for sentinel in SENTINELS:
        assert sentinel not in data, f"a secret leaked into {where}"


def test_secrets_reach_the_container_only_as_files(vm: tuple[SshHost, str]) -> None:
    host, api_version = vm
    scripts = commands("v5e1", on_host(host), api_key_version=api_version)
    for name, text in scripts.items():
        assert_clean(text, f"the {name} command text")
    host.docker.set_scenario("v5e1_ready.log", speed=2000)
    with ProcWatcher() as watcher:
        fetched = host.run(scripts[FETCH])
        assert fetched.returncode == 0, fetched.stderr.decode()
        started = host.run(scripts[START])
        assert started.returncode == 0, started.stderr.decode()
        container_id = started.stdout.decode().strip()
        ready_text = commands(
            "v5e1", on_host(host), api_key_version=api_version, start_stdout=container_id
        )[READY]
        ready = host.run(ready_text, timeout=120)
        assert ready.returncode == 0, ready.stdout.decode() + ready.stderr.decode()
        inspected = host.run("sudo docker inspect tpu-vllm")
    assert watcher.scans > 10
    assert not watcher.hits, watcher.hits
    for name, done in (("fetch", fetched), ("start", started), ("ready", ready)):
        assert_clean(done.stdout, f"{name} stdout")
        assert_clean(done.stderr, f"{name} stderr")
    assert_clean(inspected.stdout, "docker inspect")
    # The files exist, hold the secrets, and only their owner can read them.
    secrets_dir = host.home / ".tpu-vllm" / "secrets"
    for name, value in (("hf_token", HF_SENTINEL), ("vllm_api_key", API_SENTINEL)):
        path = secrets_dir / name
        assert path.read_text() == value
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    # docker saw the secrets only as read-only mounts, and HF_TOKEN_PATH naming one.
    for call in host.docker.invocations():
        assert_clean(json.dumps(call), "a docker invocation")
    via = host.env["TPU_VLLM_SECRETS_VIA"]
    assert f"via {via}".encode() in fetched.stderr
    gcloud_log = host.docker_state / "gcloud_invocations.jsonl"
    gcloud_calls = gcloud_log.read_text().splitlines() if gcloud_log.exists() else []
    # Two secret reads by gcloud (the compile cache's `gcloud storage` calls come on top); every
    # call, cache calls included, is checked for the sentinels.
    secret_reads = [c for c in gcloud_calls if json.loads(c)["argv"][1:2] == ["secrets"]]
    assert len(secret_reads) == (2 if via == "gcloud" else 0)
    for line in gcloud_calls:
        assert_clean(line, "a gcloud invocation")
    [run] = [c for c in host.docker.invocations() if "run" in c["argv"][:2]]
    argv = run["argv"]
    assert "HF_TOKEN_PATH=/run/secrets/hf_token" in argv
    assert f"{secrets_dir}/hf_token:/run/secrets/hf_token:ro" in argv
    assert f"{secrets_dir}/vllm_api_key:/run/secrets/vllm_api_key:ro" in argv
    assert not any(a.startswith(("HF_TOKEN=", "VLLM_API_KEY=")) for a in argv)
    assert "--api-key" not in argv
    # The readiness check used the key (the fake server demands it) without ever showing it.
    assert b"/v1/models lists google/gemma-4-E2B-it" in ready.stdout


def test_fetch_waits_while_the_grant_propagates(
    vm: tuple[SshHost, str], fake_secret_manager: FakeSecretManager
) -> None:
    host, api_version = vm
    fake_secret_manager.deny()  # as if the IAM grant had not reached Secret Manager yet
    timer = threading.Timer(2.5, fake_secret_manager.allow_all)
    timer.start()
    try:
        fetched = host.run(commands("v5e1", api_key_version=api_version)[FETCH], timeout=60)
    finally:
        timer.cancel()
    assert fetched.returncode == 0, fetched.stderr.decode()
    assert b"retrying" in fetched.stderr
    assert b"403" in fetched.stderr or b"PERMISSION_DENIED" in fetched.stderr
    assert_clean(fetched.stderr, "fetch stderr")
    assert (host.home / ".tpu-vllm/secrets/hf_token").read_text() == HF_SENTINEL


def test_start_without_the_secrets_warns(vm: tuple[SshHost, str]) -> None:
    host, _ = vm
    host.docker.set_scenario("v5e1_ready.log", speed=2000)
    started = host.run(commands("v5e1", on_host(host))[START])
    assert started.returncode == 0, started.stderr.decode()
    assert b"secrets/vllm_api_key is missing (has fetch-secrets run?)" in started.stderr


@pytest.mark.parametrize("content", [None, b""], ids=["missing", "empty"])
def test_entrypoint_refuses_to_serve_without_an_api_key(
    tmp_path: Path, content: bytes | None
) -> None:
    key_file = tmp_path / "vllm_api_key"
    if content is not None:
        key_file.write_bytes(content)
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "echo", "served"],
        env={"PATH": "/usr/bin:/bin", "VLLM_API_KEY_FILE": str(key_file)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "refusing to serve" in done.stderr
    assert "served" not in done.stdout


def test_entrypoint_hands_the_key_to_vllm_through_its_environment(tmp_path: Path) -> None:
    # A key of its own: the check below carries it in argv, where the watcher of a test running
    # at once on another worker would find the module's sentinel.
    key = "ENTRYPOINTkeyNOTwatched0123456789abcdef"
    key_file = tmp_path / "vllm_api_key"
    key_file.write_text(key)
    check = f'test "$VLLM_API_KEY" = "{key}" && echo key-ok'
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "sh", "-c", check],
        env={"PATH": "/usr/bin:/bin", "VLLM_API_KEY_FILE": str(key_file)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "key-ok"


def test_the_watcher_would_see_a_leak() -> None:
    """The scan above can fail: a process with a sentinel in its environment is caught. With a
    sentinel of its own: the watcher scans every process of the machine, so a leak planted with
    the real tests' sentinels would fail them when they run at once on another test worker."""
    import time

    planted = "WATCHERselftestSENTINEL0123456789"
    with ProcWatcher((planted.encode(),)) as watcher:
        proc = subprocess.Popen(["sleep", "1"], env={"LEAK": planted})
        time.sleep(0.3)
        proc.kill()
        proc.wait()
    assert watcher.hits
