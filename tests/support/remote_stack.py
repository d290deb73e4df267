"""The exact command texts the program hands to `remote.Command`, taken from a mocked run.

Tests over real SSH run these texts, not a re-rendering, so what they prove holds for what
`pulumi up` would send. Outputs that only exist after a command ran (the container id that
`vllm-start` prints, the API key version's name) are fed back through the mocks.
"""

from __future__ import annotations

import calendar
import json
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pulumi.runtime import mocks

from components.remote_scripts import READINESS_ANSWER_SECONDS
from components.vm.node_scripts import READINESS_HEARTBEAT_SECONDS
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost
from tests.support.mock_outputs import cloud_outputs
from tests.support.pulumi_program import TEST_PROJECT, ProgramRun, run_program

IMAGE = "vllm/vllm-tpu:nightly"
START = "vllm-start"
READY = "vllm-ready"
FETCH = "secrets-fetch"


def commands(
    stack: str,
    changes: Mapping[str, Any] | None = None,
    *,
    start_stdout: str | None = None,
    api_key_version: str | None = None,
) -> dict[str, str]:
    """`{command name: create text}` for the stack, with real outputs substituted."""

    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = cloud_outputs(args)
        if args.typ == "command:remote:Command" and args.name == START and start_stdout:
            result["stdout"] = start_stdout
        if args.typ == "gcp:secretmanager/secretVersion:SecretVersion" and api_key_version:
            result["name"] = api_key_version
        return result

    run = run_program(stack, changes, outputs_for=outputs)
    return {r.name: str(r.inputs["create"]) for r in run.of_type("command:remote:Command")}


def start_text(run: ProgramRun) -> str:
    """The `vllm-start` command's text in a mocked run of a VM stack."""
    start = next(c for c in run.of_type("command:remote:Command") if c.name == "vllm-start")
    return str(start.inputs["create"])


def docker_run_env(script: str) -> dict[str, str]:
    """The `-e NAME=value` flags of the rendered `docker run` (one flag per line), up to the
    `vllm serve` line: what the container's environment holds."""
    env: dict[str, str] = {}
    for line in script[script.index("sudo docker run") :].splitlines():
        words = shlex.split(line.strip().removesuffix("\\"))
        if words[:1] == ["vllm"]:
            break
        if words[:1] == ["-e"]:
            name, _, value = words[1].partition("=")
            env[name] = value
    return env


def node_with_secrets(
    start_host: Callable[..., SshHost],
    secret_manager: FakeSecretManager,
    metadata: FakeMetadataServer,
    *,
    hf_token: bytes,
    api_key: bytes,
    env: Mapping[str, str] | None = None,
) -> tuple[SshHost, str]:
    """An SSH "TPU VM" whose identity can read an HF token and an API key in Secret Manager.

    Returns the host and the API key version's name (what the program's fetch command names).
    """
    secret_manager.add_version(TEST_PROJECT, "hf-token", hf_token)
    version = secret_manager.add_version(TEST_PROJECT, "tpu-vllm-v5e1-api-key", api_key)
    metadata.access_token = secret_manager.token
    host = start_host(
        env={
            "GCE_METADATA_HOST": metadata.host,
            "SECRET_MANAGER_API_ENDPOINT": secret_manager.url,
            **(env or {}),
        },
        images_present=[IMAGE],
    )
    return host, version


def on_host(host: SshHost, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`changes` plus the host's own free port as `vllm.port`: the fake vLLM binds it, so two
    test runs on one machine never collide on vLLM's default 8000."""
    return {"tpu-vllm:vllm.port": host.vllm_port, **(changes or {})}


def start(host: SshHost, changes: Mapping[str, Any] | None = None) -> str:
    done = host.run(commands("v5e1", on_host(host, changes))[START])
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


class Readiness:
    """The readiness command running over SSH, with each stdout line's arrival time."""

    def __init__(
        self,
        host: SshHost,
        container_id: str,
        changes: Mapping[str, Any] | None,
        *,
        heartbeat: float | None = None,
        answer_timeout: float | None = None,
    ) -> None:
        text = commands("v5e1", on_host(host, changes), start_stdout=container_id)[READY]
        if heartbeat is not None:  # the program's text, with only the interval shortened
            flag = f"--heartbeat {READINESS_HEARTBEAT_SECONDS}"
            assert flag in text, "the readiness command lost its heartbeat flag"
            text = text.replace(flag, f"--heartbeat {heartbeat}")
        if answer_timeout is not None:  # and the answers' bound, for a server that hangs
            flag = f"--answer-timeout {READINESS_ANSWER_SECONDS}"
            assert flag in text, "the readiness command lost its answer-timeout flag"
            text = text.replace(flag, f"--answer-timeout {answer_timeout}")
        self.started = time.monotonic()
        self.proc = host.popen(text)
        self.lines: list[tuple[float, str]] = []
        self.stderr = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((time.time(), raw.decode().rstrip("\n")))

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code

    @property
    def stdout(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def when(self, text: str) -> float:
        return next(t for t, line in self.lines if text in line)


def container_log(host: SshHost, container_id: str) -> list[dict[str, Any]]:
    """The fake daemon's json-file log: one record per line with its wall-clock time."""
    path = host.docker_state / "containers" / container_id / f"{container_id}-json.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rfc3339(text: str) -> float:
    main, _, frac = text.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{frac or 0}")


def run_crash(host: SshHost, fixture: str, speed: float = 200) -> tuple[int, float, Readiness, str]:
    """Start a container that dies at boot; (exit code, seconds from its exit to the check's
    end, the readiness run, the container id)."""
    host.docker.set_scenario(fixture, speed=speed)
    container_id = start(host)
    readiness = Readiness(host, container_id, None)
    exited: list[float] = []

    def watch() -> None:
        host.docker.wait_status(container_id, "exited", timeout=60)
        exited.append(time.monotonic())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    code = readiness.wait(timeout=60)
    finished = time.monotonic()
    watcher.join(timeout=10)
    assert exited, "the container never exited"
    return code, finished - exited[0], readiness, container_id
