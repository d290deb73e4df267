"""The GKE readiness Job's script, run as the Job runs it, against a loopback fake vLLM.

The script and the Job's environment come from a mocked run of the v6e4-gke program (the
ConfigMap the pod mounts, the Job's env); only the address, the key file and the timings are
pointed at the test. The pod's shell is busybox ash (curlimages/curl is Alpine): the script runs
under `busybox sh` when the machine has busybox, else under bash. The fake server is
`tests/fakes/openai_server.py` (vLLM's 401 for a key it was not started with, `/health`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
MODEL = "google/gemma-4-31B-it"
SERVER_KEY = "key-the-pods-started-with"
SHELL = ["busybox", "sh"] if shutil.which("busybox") else ["bash"]


@pytest.fixture(scope="module")
def program() -> ProgramRun:
    return run_program(STACK)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(api_key=SERVER_KEY, model=MODEL).start()
    try:
        yield fake
    finally:
        fake.stop()


def job_env(program: ProgramRun) -> dict[str, str]:
    job = program.one("kubernetes:batch/v1:Job").inputs
    [container] = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def run_job(
    program: ProgramRun,
    server: FakeOpenAI,
    tmp_path: Path,
    *,
    key: str,
    changes: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """The Job's script with the Job's env, aimed at `server`, holding `key` in its key file."""
    script = tmp_path / "wait_ready.sh"
    script.write_text(program.one("kubernetes:core/v1:ConfigMap").inputs["data"]["wait_ready.sh"])
    key_file = tmp_path / "vllm_api_key"
    key_file.write_text(key)
    host, port = server.url.removeprefix("http://").split(":")
    env = {
        **job_env(program),
        "TARGET_HOST": host,
        "TARGET_PORT": port,
        "API_KEY_FILE": str(key_file),
        "POD_NAMESPACE": "tpu-vllm-v6e4-gke",
        "POLL_SECONDS": "1",
        "PATH": os.environ["PATH"],
        **(changes or {}),
    }
    return subprocess.run(
        [*SHELL, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_right_key_passes(program: ProgramRun, server: FakeOpenAI, tmp_path: Path) -> None:
    done = run_job(program, server, tmp_path, key=SERVER_KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ready: /health 200 and /v1/models lists {MODEL}" in done.stdout
    assert server.paths()[-2:] == ["/health", "/v1/models"]


def test_without_a_key_file_variable_the_job_fails_at_once_naming_it(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """The secrets live in components/k8s_manifests.py's SECRETS_DIR, not the VM path's
    /run/secrets (issue 16): a Job without API_KEY_FILE must not fall back to a guessed path
    and spend its deadline on 401s, but stop at once and say which variable is missing."""
    script = tmp_path / "wait_ready.sh"
    script.write_text(program.one("kubernetes:core/v1:ConfigMap").inputs["data"]["wait_ready.sh"])
    host, port = server.url.removeprefix("http://").split(":")
    env = {
        **job_env(program),
        "TARGET_HOST": host,
        "TARGET_PORT": port,
        "POD_NAMESPACE": "tpu-vllm-v6e4-gke",
        "POLL_SECONDS": "1",
        "PATH": os.environ["PATH"],
    }
    env.pop("API_KEY_FILE", None)
    done = subprocess.run(
        [*SHELL, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert "API_KEY_FILE" in done.stderr and "is not set" in done.stderr
    assert "/run/secrets" not in done.stdout + done.stderr
    assert server.paths() == []  # it asked nothing


def test_a_refused_key_fails_the_job_and_names_the_key(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """vLLM answers 401 to a key it was not started with: a wrong or rotated key. That fails
    the Job (never skipped as "answered"), within the grace, saying the key is the cause."""
    began = time.monotonic()
    done = run_job(
        program, server, tmp_path, key="a-rotated-key", changes={"AUTH_GRACE_SECONDS": "2"}
    )
    assert done.returncode != 0, done.stdout
    assert time.monotonic() - began < 30  # the grace, not the 90-minute deadline
    assert "/v1/models answered HTTP 401: the API key is the likely cause" in done.stdout
    assert "FAILED:" in done.stderr and "a wrong or rotated key" in done.stderr
    assert "rollout restart deploy/vllm" in done.stderr
    assert "ready:" not in done.stdout
    assert [c.status for c in server.calls("/v1/models")][-1] == 401
    assert "a-rotated-key" not in done.stdout + done.stderr  # the key never reaches the log


def test_a_refusal_that_outlasts_the_deadline_still_blames_the_key(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    done = run_job(
        program,
        server,
        tmp_path,
        key="wrong",
        changes={"DEADLINE_SECONDS": "3", "AUTH_GRACE_SECONDS": "600"},
    )
    assert done.returncode != 0, done.stdout
    assert "no replica answered /v1/models within 3s" in done.stderr
    assert "the API key is the likely cause" in done.stderr


def test_a_refusal_that_ends_within_the_grace_is_waited_out(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """A pod of the previous template (the old key) may answer for a moment while it
    terminates; once the new pods answer, the Job passes."""
    server.api_key = "the-old-key"

    def rotate() -> None:
        time.sleep(2.5)
        server.api_key = SERVER_KEY

    threading.Thread(target=rotate, daemon=True).start()
    done = run_job(program, server, tmp_path, key=SERVER_KEY, changes={"AUTH_GRACE_SECONDS": "30"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HTTP 401" in done.stdout and "ready:" in done.stdout
