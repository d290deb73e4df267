"""The GKE readiness Job's script, run as the Job runs it, against loopback fakes of vLLM and
of the Kubernetes API's Deployment read.

The script and the Job's environment come from a mocked run of the v6e4-gke program (the
ConfigMap the pod mounts, the Job's env); only the addresses, the key and token files and the
timings are pointed at the test. The pod's shell is busybox ash (curlimages/curl is Alpine): the
script runs under `busybox sh` when the machine has busybox, else under bash. The fakes are
`tests/support/fakes/openai_server.py` (vLLM's 401 for a key it was not started with, `/health`) and
`tests/support/fakes/kube_deployments.py` (the Deployment as the API server and the deployment
controller's rolling update show it).
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

from tests.support.fakes.kube_deployments import FakeDeploymentApi, Rollout, rolling_update
from tests.support.fakes.openai_server import FakeOpenAI
from tests.support.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
NS = "tpu-vllm-v6e4-gke"
MODEL = "google/gemma-4-31B-it"
SERVER_KEY = "key-the-pods-started-with"
POD_TOKEN = "PODTOKENSENTINEL-readiness-job"
SHELL = ["busybox", "sh"] if shutil.which("busybox") else ["bash"]
READY = f"ready: /health 200, /v1/models lists {MODEL}, and the model answered"
#: A Deployment whose generation 1 is rolled out, both replicas Ready: nothing to wait for.
ROLLED_OUT = [Rollout(1, 1, 2, 2, 2, 2)]


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


@pytest.fixture
def api() -> Iterator[FakeDeploymentApi]:
    fake = FakeDeploymentApi(NS, "vllm", POD_TOKEN, list(ROLLED_OUT)).start()
    try:
        yield fake
    finally:
        fake.stop()


def job_env(program: ProgramRun) -> dict[str, str]:
    job = program.one("kubernetes:batch/v1:Job").inputs
    [container] = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def pod_account(tmp_path: Path) -> Path:
    """The pod's service-account directory as the kubelet mounts it: token, CA, namespace."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(POD_TOKEN)
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (account / "namespace").write_text(NS)
    return account


def run_job(
    program: ProgramRun,
    server: FakeOpenAI,
    tmp_path: Path,
    *,
    key: str,
    api: FakeDeploymentApi,
    changes: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """The Job's script with the Job's env, aimed at `server` and at `api` for the Deployment,
    holding `key` in its key file."""
    script = tmp_path / "wait_ready.sh"
    script.write_text(program.named("vllm-scripts").inputs["data"]["wait_ready.sh"])
    key_file = tmp_path / "vllm_api_key"
    key_file.write_text(key)
    host, port = server.url.removeprefix("http://").split(":")
    env = {
        **job_env(program),
        "TARGET_HOST": host,
        "TARGET_PORT": port,
        "API_KEY_FILE": str(key_file),
        "POD_NAMESPACE": NS,
        "KUBERNETES_API": api.url,
        "SERVICE_ACCOUNT_DIR": str(pod_account(tmp_path)),
        "POLL_SECONDS": "1",
        "PATH": os.environ["PATH"],
        # Its own scratch directory: in a pod /tmp is the Job's own; here other tests' Jobs
        # run at once on other workers.
        "TMPDIR": str(tmp_path),
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


def test_the_right_key_passes(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path
) -> None:
    done = run_job(program, server, tmp_path, key=SERVER_KEY, api=api)
    assert done.returncode == 0, done.stdout + done.stderr
    assert READY in done.stdout
    assert server.paths()[-4:] == [
        "/health",
        "/v1/models",
        "/v1/chat/completions",
        "/v1/chat/completions",
    ]
    chat, tool = (r.body for r in server.calls("/v1/chat/completions")[-2:])
    # The VM's own questions (scripts/remote/wait_ready.py), asked through the Service.
    assert chat["messages"] == [{"role": "user", "content": "Say hi in five words."}]
    assert tool["tool_choice"] == "auto" and tool["tools"][0]["function"]["name"] == "get_weather"
    assert "the model called get_weather with a city" in done.stdout


def test_without_a_key_file_variable_the_job_fails_at_once_naming_it(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """The secrets live in components/gke/k8s_manifests.py's SECRETS_DIR, not the VM path's
    /run/secrets: a Job without API_KEY_FILE must not fall back to a guessed path
    and spend its deadline on 401s, but stop at once and say which variable is missing."""
    script = tmp_path / "wait_ready.sh"
    script.write_text(program.named("vllm-scripts").inputs["data"]["wait_ready.sh"])
    host, port = server.url.removeprefix("http://").split(":")
    env = {
        **job_env(program),
        "TARGET_HOST": host,
        "TARGET_PORT": port,
        "POD_NAMESPACE": NS,
        "POLL_SECONDS": "1",
        "PATH": os.environ["PATH"],
        # Its own scratch directory: in a pod /tmp is the Job's own; here other tests' Jobs
        # run at once on other workers.
        "TMPDIR": str(tmp_path),
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


@pytest.mark.parametrize("refused", [401, 403])
def test_a_refused_key_fails_the_job_and_names_the_key(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path, refused: int
) -> None:
    """vLLM answers 401 to a key it was not started with: a wrong or rotated key; a proxy in
    front of it answers 403. Either fails the Job (never skipped as "answered"), within the
    grace, saying the key is the cause."""
    server.refused_status = refused
    began = time.monotonic()
    done = run_job(
        program,
        server,
        tmp_path,
        key="a-rotated-key",
        api=api,
        changes={"AUTH_GRACE_SECONDS": "2"},
    )
    assert done.returncode != 0, done.stdout
    assert time.monotonic() - began < 30  # the grace, not the 90-minute deadline
    assert f"/v1/models answered HTTP {refused}: the API key is the likely cause" in done.stdout
    assert "FAILED:" in done.stderr and "a wrong or rotated key" in done.stderr
    assert "rollout restart deploy/vllm" in done.stderr
    assert "ready:" not in done.stdout
    assert [c.status for c in server.calls("/v1/models")][-1] == refused
    assert "a-rotated-key" not in done.stdout + done.stderr  # the key never reaches the log


def test_a_refusal_that_outlasts_the_deadline_still_blames_the_key(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path
) -> None:
    done = run_job(
        program,
        server,
        tmp_path,
        key="wrong",
        api=api,
        changes={"DEADLINE_SECONDS": "3", "AUTH_GRACE_SECONDS": "600"},
    )
    assert done.returncode != 0, done.stdout
    assert "no replica answered /v1/models within 3s" in done.stderr
    assert "the API key is the likely cause" in done.stderr


def test_a_refusal_that_ends_within_the_grace_is_waited_out(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path
) -> None:
    """A refusal that stops within the grace (here the server's key changes under the Job) is
    waited out; once the pods answer the Job's key, the Job passes."""
    server.api_key = "the-old-key"

    def rotate() -> None:
        time.sleep(2.5)
        server.api_key = SERVER_KEY

    threading.Thread(target=rotate, daemon=True).start()
    done = run_job(
        program, server, tmp_path, key=SERVER_KEY, api=api, changes={"AUTH_GRACE_SECONDS": "30"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HTTP 401" in done.stdout and "ready:" in done.stdout


# --- the update window: the Job passes only once its generation is rolled out -----------------


def test_an_update_is_ready_only_once_every_old_pod_is_replaced(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """During a rolling update the old pods keep serving through the Service
    (here the fake vLLM, an old pod, answers the whole time), one new pod at a time replaces
    them, each Ready only after its startup probe asked the model. The Job must ask nothing
    until the Deployment shows its generation rolled out (`kubectl rollout status`'s checks,
    kubectl `pkg/polymorphichelpers/rollout_status.go`): the last old pod gone, which with
    maxUnavailable 0 means every new replica answered. Then it asks through the Service."""
    asked_before: list[tuple[int, int]] = []  # (state served, vLLM requests so far)
    states = rolling_update(replicas=2)
    api = FakeDeploymentApi(
        NS,
        "vllm",
        POD_TOKEN,
        states,
        on_read=lambda i: asked_before.append((i, len(server.paths()))),
    ).start()
    try:
        done = run_job(program, server, tmp_path, key=SERVER_KEY, api=api)
    finally:
        api.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    # Every state was read, in order, and vLLM was asked nothing before the last one.
    assert [state for state, _ in asked_before] == list(range(len(states)))
    assert all(asked == 0 for _, asked in asked_before), asked_before
    assert server.paths()[-4:-2] == ["/health", "/v1/models"]
    out = done.stdout
    steps = [
        "waiting for the Deployment controller to observe generation 2 (observed: 1)",
        "1 of 2 replicas of generation 2 created, one at a time; the old ones serve",
        "2 replicas of generation 2, 1 old one still running: they serve until the last new one",
        "rollout: generation 2 rolled out, 2 of 2 replicas Ready",
        READY,
    ]
    assert [out.index(step) for step in steps] == sorted(out.index(step) for step in steps)
    # It read the Deployment as curl, so the API server indented its JSON.
    assert all(agent.startswith("curl/") for _, agent in api.served)
    assert POD_TOKEN not in done.stdout + done.stderr  # the token never reaches the log


def test_a_create_is_ready_on_its_first_replica(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """A create has no old pods: the controller starts all N at once (`NewRSNewReplicas`:
    nothing to surge past), and the Job passes on the first Ready one; flex-start nodes come
    when they come."""
    states = [Rollout(1, 0, 2), Rollout(1, 1, 2, 2, 2, 0), Rollout(1, 1, 2, 2, 2, 1)]
    with FakeDeploymentApi(NS, "vllm", POD_TOKEN, states) as api:
        done = run_job(program, server, tmp_path, key=SERVER_KEY, api=api)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "none Ready yet" in done.stdout
    assert "rollout: generation 1 rolled out, 1 of 2 replicas Ready" in done.stdout
    assert READY in done.stdout


def test_a_new_build_that_never_answers_times_out_and_leaves_the_old_serving(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """The new pod's startup probe never passes (its model does not answer): it stays unready,
    the controller keeps both old replicas (maxUnavailable 0). The Job fails at its deadline,
    naming the rollout and how far it got, says the old replicas keep serving, and never took
    an old pod's answer for the new build's."""
    stuck = [Rollout(2, 2, 2, 3, 1, 2)]  # one new pod, not Ready, beside two Ready old ones
    with FakeDeploymentApi(NS, "vllm", POD_TOKEN, stuck) as api:
        done = run_job(
            program, server, tmp_path, key=SERVER_KEY, api=api, changes={"DEADLINE_SECONDS": "3"}
        )
    assert done.returncode != 0, done.stdout
    assert "deployment/vllm did not roll out generation 2 within 3s" in done.stderr
    assert "1 of 2 replicas of generation 2 created" in done.stderr
    assert "Old replicas, if any, keep serving" in done.stderr
    assert f"kubectl -n {NS} rollout status deploy/vllm" in done.stderr
    assert "ready:" not in done.stdout
    assert server.paths() == []


def test_old_replicas_still_running_hold_the_job_back(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """Every new replica exists (updatedReplicas == spec.replicas) but an old one still runs
    (replicas > updatedReplicas): the last new pod has not become available, so the controller
    keeps the old one (maxUnavailable 0). Not rolled out: the Job says so and never "ready"."""
    waiting = [Rollout(2, 2, 2, 3, 2, 2)]
    with FakeDeploymentApi(NS, "vllm", POD_TOKEN, waiting) as api:
        done = run_job(
            program, server, tmp_path, key=SERVER_KEY, api=api, changes={"DEADLINE_SECONDS": "3"}
        )
    assert done.returncode != 0, done.stdout
    assert "2 replicas of generation 2, 1 old one still running" in done.stderr
    assert "ready:" not in done.stdout and "rolled out" not in done.stdout
    assert server.paths() == []


def test_a_refused_deployment_read_fails_naming_the_role(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """No RBAC (the Role or its binding missing): HTTP 403 from the API server. The Job fails
    within the grace, naming the Role, instead of waiting out its 90-minute deadline."""
    with FakeDeploymentApi(NS, "vllm", POD_TOKEN, list(ROLLED_OUT)) as api:
        api.forbidden = True
        began = time.monotonic()
        done = run_job(
            program, server, tmp_path, key=SERVER_KEY, api=api, changes={"AUTH_GRACE_SECONDS": "2"}
        )
    assert done.returncode != 0, done.stdout
    assert time.monotonic() - began < 30
    assert "HTTP 403 for deployment vllm" in done.stderr
    assert "Role tpu-vllm-rollout-reader" in done.stderr
    assert "get role,rolebinding tpu-vllm-rollout-reader" in done.stderr
    assert server.paths() == []


def test_the_job_sends_the_pods_token_only_as_a_header(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """The fake refuses a read without `Authorization: Bearer TOKEN` (401); with a wrong token
    file the Job never gets past the rollout step, and neither token reaches the log."""
    with FakeDeploymentApi(NS, "vllm", "another-token", list(ROLLED_OUT)) as api:
        done = run_job(
            program,
            server,
            tmp_path,
            key=SERVER_KEY,
            api=api,
            changes={"AUTH_GRACE_SECONDS": "2"},
        )
    assert done.returncode != 0
    assert "HTTP 401 for deployment vllm" in done.stderr
    assert POD_TOKEN not in done.stdout + done.stderr
    assert server.paths() == []


WORDS = "answer 'Say hi in five words.' with words (empty content, or markup)"
NO_CALL = "call get_weather (no tool call of it)"
NO_CITY = "call get_weather with JSON arguments holding a city"
BAD_ANSWERS = {
    "empty-content": ("empty_content", True, WORDS),
    "garbage": ("reply", "<pad><pad><pad>", WORDS),
    "text-not-a-call": ("malformed_tool_call", "no_tool_calls", NO_CALL),
    "another-function": ("malformed_tool_call", "wrong_name", NO_CALL),
    "non-json-arguments": ("malformed_tool_call", "non_json", NO_CITY),
    "no-city": ("malformed_tool_call", "missing_argument", NO_CITY),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_server_that_cannot_answer_fails_the_job_with_its_answer(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path, case: str
) -> None:
    """The Job asks what the VM asks; an empty, garbled or missing answer fails
    `pulumi up` with the status and the body's start, and never shows the key."""
    knob, value, said = BAD_ANSWERS[case]
    before = getattr(server, knob)
    setattr(server, knob, value)
    try:
        done = run_job(program, server, tmp_path, key=SERVER_KEY, api=api)
    finally:
        setattr(server, knob, before)
    assert done.returncode == 1, done.stdout
    assert f"FAILED: the model did not {said}: HTTP 200" in done.stderr, done.stderr
    assert '"choices"' in done.stderr  # the body's first 500 bytes
    assert READY not in done.stdout
    assert SERVER_KEY not in done.stdout + done.stderr


def test_an_answer_that_does_not_come_in_time_fails_the_job(
    program: ProgramRun, server: FakeOpenAI, api: FakeDeploymentApi, tmp_path: Path
) -> None:
    server.delay = 3.0
    try:
        done = run_job(program, server, tmp_path, key=SERVER_KEY, api=api,
                       changes={"ANSWER_SECONDS": "1"})  # fmt: skip
    finally:
        server.delay = 0.0
    assert done.returncode == 1
    assert "FAILED: the model did not answer 'Say hi in five words.': HTTP 000" in done.stderr


def test_without_a_tool_call_parser_only_the_chat_is_asked(program: ProgramRun) -> None:
    plain = run_program(STACK, {"tpu-vllm:vllm.toolCallParser": None})
    env = job_env(plain)
    assert env["TOOL_BODY"] == "" and '"Say hi in five words."' in env["CHAT_BODY"]
    assert job_env(program)["TOOL_BODY"]  # the stack file's gemma4 parser: both are asked
