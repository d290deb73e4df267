"""The compile cache over real SSH: fresh nodes on demand (each an SshHost with an empty home and
its own fake docker), one shared fake bucket, and the program's own start and readiness texts,
for the tests of the cache on a node and the benchmark of its time to ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.vm.vllm import parse_ready
from tests.support.fakes.gcs_api import QUICK_RETRIES, FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.loopback import free_port
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost, SshHostFactory
from tests.support.remote_stack import FETCH, IMAGE, READY, START, commands

HF_SENTINEL = "hf_CACHEsentinelNEVERinCACHE0123456789"
API_SENTINEL = "APIKEYcacheSENTINELneverINcache0123456789ab"
COLD = "v5e1_ready.log"
WARM = "v5e1_ready_cached.log"
SPEED = 400  # 857 s of cold boot in ~2 s


@dataclass
class Start:
    node: SshHost
    container: str
    stdout: str
    start_stderr: str
    code: int
    ready_at: float

    @property
    def result(self) -> dict[str, Any]:
        return parse_ready(self.stdout)

    @property
    def work(self) -> Path:
        return self.node.home / ".tpu-vllm" / "xla-cache"

    def wait_saved(self, timeout: float = 30) -> dict[str, Any]:
        path = self.work / "save.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                return dict(json.loads(path.read_text()))
            time.sleep(0.1)
        log = (self.work / "save.log").read_text() if (self.work / "save.log").exists() else ""
        raise AssertionError(f"no save result after {timeout}s; save.log:\n{log}")

    def wait_last_save(self, timeout: float = 30) -> dict[str, Any]:
        """Once the container has stopped: the watcher's last save (its summary says why)."""
        path = self.work / "save.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                summary = dict(json.loads(path.read_text()))
                if str(summary.get("why", "")).startswith("the container"):
                    return summary
            time.sleep(0.1)
        raise AssertionError(f"no last save after {timeout}s; save.log:\n{self.save_log()}")

    @property
    def xla_cache(self) -> str:
        """How the container's boot found its XLA cache: "warm" or "cold" (fake_docker.Boot)."""
        container = self.node.docker.container(self.container)
        assert container is not None
        return str(container.raw_state().get("XlaCache"))

    def save_log(self) -> str:
        return (self.work / "save.log").read_text()


class Lab:
    """One shared bucket; fresh nodes on demand."""

    def __init__(
        self,
        factory: SshHostFactory,
        secrets: FakeSecretManager,
        metadata: FakeMetadataServer,
        root: Path,
        api: FakeGcsApi,
    ) -> None:
        self.factory = factory
        self.secrets = secrets
        self.metadata = metadata
        self.root = root
        self.api = api
        self.store = GcsStore(str(root))
        self.prefix = self.prefix_for(None)
        self.bucket = self.prefix[len("gs://") :].split("/", 1)[0]
        self.store.create_bucket(self.bucket)
        self.open_up()

    def open_up(self) -> None:
        """The SSH user (a different uid under root) must read and write the store."""
        for folder, _dirs, files in os.walk(self.root):
            os.chmod(folder, 0o777)  # noqa: S103 - a test-only temporary directory
            for name in files:
                os.chmod(os.path.join(folder, name), 0o666)  # noqa: S103

    @staticmethod
    def prefix_for(changes: dict[str, Any] | None) -> str:
        match = re.search(r"^cache_prefix=(gs://\S+/)$", commands("v5e1", changes)[START], re.M)
        assert match, "the start script names no cache prefix"
        return match.group(1)

    def node(
        self,
        *,
        via: str = "auto",
        images: tuple[str, ...] = (IMAGE,),
        env: dict[str, str] | None = None,
    ) -> SshHost:
        self.secrets.add_version("test-project", "hf-token", HF_SENTINEL.encode())
        version = self.secrets.add_version(
            "test-project", "tpu-vllm-v5e1-api-key", API_SENTINEL.encode()
        )
        self.metadata.access_token = self.secrets.token
        self.api.token = self.secrets.token
        host = self.factory(
            env={
                "GCE_METADATA_HOST": self.metadata.host,
                "SECRET_MANAGER_API_ENDPOINT": self.secrets.url,
                "FAKE_GCS_ROOT": str(self.root),
                "STORAGE_API_ENDPOINT": self.api.url,
                "TPU_VLLM_CACHE_VIA": via,
                **QUICK_RETRIES,
                **(env or {}),
            },
            images_present=images,
        )
        fetched = host.run(commands("v5e1", api_key_version=version)[FETCH])
        assert fetched.returncode == 0, fetched.stderr.decode()
        return host

    def start(
        self,
        node: SshHost,
        changes: dict[str, Any] | None = None,
        *,
        scenario: dict[str, Any] | None = None,
    ) -> Start:
        node.docker.set_scenarios(
            [scenario or {"log": COLD, "warm_log": WARM, "speed": SPEED}]  # type: ignore[list-item]
        )
        # A port of its own (not in the cache key): other suites serve fakes on 8000.
        changes = {**(changes or {}), "tpu-vllm:vllm.port": free_port()}
        started = node.run(commands("v5e1", changes)[START], timeout=120)
        assert started.returncode == 0, started.stderr.decode()
        container = started.stdout.decode().strip().splitlines()[-1]
        text = commands("v5e1", changes, start_stdout=container)[READY]
        ready = node.run(text, timeout=120)
        self.open_up()
        stdout = ready.stdout.decode()
        if ready.returncode != 0:  # show why in the assertion message
            stdout += "\n--- container log tail ---\n" + node.docker.logs(container)[-1500:]
        return Start(
            node,
            container,
            stdout,
            started.stderr.decode(),
            ready.returncode,
            time.time(),
        )

    def objects(self, prefix: str | None = None) -> list[str]:
        key = (prefix or self.prefix)[len(f"gs://{self.bucket}/") :]
        return self.store.names(self.bucket, key)

    def gcloud_calls(self, node: SshHost) -> list[dict[str, Any]]:
        path = node.docker_state / "gcloud_invocations.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.strip()]
