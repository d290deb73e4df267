"""The GKE server container's startup probe, run as the kubelet runs it, against the fake vLLM.

A pod is Ready only after its model has answered, so a rolling update removes
an old replica only once a new one answered, and a build that starts but cannot answer never
takes traffic. The kubelet runs an exec probe's command in the container and calls it passed on
exit status 0 (Kubernetes docs "Configure Liveness, Readiness and Startup Probes"; kubelet
`pkg/probe/exec`): here the command comes from a mocked run of the v6e4-gke program, with only
the script's path, the port and the key file pointed at the test, and runs with this machine's
Python (the server image's is `python:3.12-slim-bookworm`'s: vllm-project/tpu-inference
`docker/Dockerfile`).
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes.openai_server import FakeOpenAI
from tests.support.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
MODEL = "google/gemma-4-31B-it"
KEY = "PROBEKEYSENTINEL-pods-started-with"


@pytest.fixture(scope="module")
def program() -> ProgramRun:
    return run_program(STACK)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(api_key=KEY, model=MODEL).start()
    try:
        yield fake
    finally:
        fake.stop()


def startup_probe(program: ProgramRun) -> dict[str, object]:
    deployment = program.one("kubernetes:apps/v1:Deployment").inputs
    [container] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    probe: dict[str, object] = container["startupProbe"]
    return probe


def run_probe(
    program: ProgramRun,
    server: FakeOpenAI,
    tmp_path: Path,
    *,
    key: str = KEY,
    answer_timeout: str | None = None,
    key_file_present: bool = True,
    port: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The Deployment's probe command, its files and port pointed at the test."""
    script = tmp_path / "wait_ready.py"
    script.write_text(program.named("vllm-scripts").inputs["data"]["wait_ready.py"])
    key_file = tmp_path / "vllm_api_key"
    if key_file_present:
        key_file.write_text(key + "\n")
    command = list(startup_probe(program)["exec"]["command"])  # type: ignore[index]
    assert command[:2] == ["python3", "/tpu-vllm/wait_ready.py"]
    flags = dict(itertools.pairwise(command))
    replace = {
        "--port": port or server.url.rsplit(":", 1)[1],
        "--api-key-file": str(key_file),
        **({"--answer-timeout": answer_timeout} if answer_timeout else {}),
    }
    args = [replace.get(prev, arg) for prev, arg in zip(["", *command], command, strict=False)]
    assert flags["--model"] == MODEL
    return subprocess.run(
        [sys.executable, str(script), *args[2:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_server_whose_model_answers_passes(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    done = run_probe(program, server, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ready: the model answered and called get_weather"
    chats = ["/v1/chat/completions"] * 2  # the chat, then the tool call
    assert server.paths() == ["/health", "/v1/models", *chats]
    chat, tool = (r.body for r in server.calls("/v1/chat/completions"))
    assert chat["messages"] == [{"role": "user", "content": "Say hi in five words."}]
    assert tool["tool_choice"] == "auto" and tool["tools"][0]["function"]["name"] == "get_weather"
    # The key went as a header, read from the file; the command holds only its path.
    assert server.calls("/v1/models")[0].headers["Authorization"] == f"Bearer {KEY}"
    assert KEY not in " ".join(startup_probe(program)["exec"]["command"])  # type: ignore[index]


def test_a_starting_server_fails_fast_and_asks_nothing_else(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """Before vLLM is up, /health does not answer 200: one quick failure per period, and the
    model is not asked (the kubelet counts it against the readiness timeout)."""
    server.health_status = 503
    began = time.monotonic()
    done = run_probe(program, server, tmp_path)
    assert done.returncode == 1
    assert time.monotonic() - began < 10
    assert done.stdout.strip() == (
        "not ready: /health: HTTP 503: vLLM's answer once its engine has died"
    )
    assert server.paths() == ["/health"]


def test_a_server_not_listening_yet_is_said_to_be_starting(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """vLLM listens only once it has loaded and compiled: until then nothing answers."""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = str(closed.getsockname()[1])
        done = run_probe(program, server, tmp_path, port=port)
    assert done.returncode == 1
    assert done.stdout.startswith("not ready: /health: nothing answered (")
    assert done.stdout.rstrip().endswith("the server is not up yet")


def test_a_body_cut_short_is_a_failure_not_a_traceback(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """An answer whose body ends before its Content-Length (a server dying mid-answer) raises
    http.client.IncompleteRead in urllib: the probe must still say what happened."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_short() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")

        threading.Thread(target=answer_short, daemon=True).start()
        done = run_probe(program, server, tmp_path, port=str(port))
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("not ready: /health: nothing answered (IncompleteRead")


def test_a_missing_key_file_is_named(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    done = run_probe(program, server, tmp_path, key_file_present=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "not ready: cannot read the API key file" in done.stdout
    assert "No such file or directory" in done.stdout


def test_a_refused_key_fails_naming_the_key_but_not_showing_it(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    done = run_probe(program, server, tmp_path, key="PROBEKEYSENTINEL-a-rotated-key")
    assert done.returncode == 1
    assert "/v1/models answered HTTP 401: the API key is the likely cause" in done.stdout
    assert "PROBEKEYSENTINEL" not in done.stdout + done.stderr
    assert "/v1/chat/completions" not in server.paths()


WORDS = "the model did not answer 'Say hi in five words.'"
CALL = "the model did not call get_weather"
#: (knob, value, what the probe says): the fake's failure shapes.
BAD = {
    "empty-content": ("empty_content", True, f"{WORDS}: HTTP 200 with empty content"),
    "garbage": ("reply", "<pad><pad><pad>", f"{WORDS}: HTTP 200 with content that is no answer"),
    "http-500": ("internal_error", True, f"{WORDS}: HTTP 500"),
    "text-not-a-call": ("malformed_tool_call", "no_tool_calls", f"{CALL}: HTTP 200 without"),
    "another-function": ("malformed_tool_call", "wrong_name", f"{CALL}: HTTP 200 calling"),
    "non-json-arguments": (
        "malformed_tool_call",
        "non_json",
        f"{CALL}: HTTP 200 with a get_weather call whose arguments are not a JSON object",
    ),
    "no-city": (
        "malformed_tool_call",
        "missing_argument",
        f"{CALL}: HTTP 200 with a get_weather call without a city",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_build_that_cannot_answer_never_becomes_ready(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path, case: str
) -> None:
    """The pod stays unready (so no traffic, and the old replica stays), and the probe's line,
    which the kubelet puts in the pod's events, says what the model answered."""
    knob, value, said = BAD[case]
    setattr(server, knob, value)
    done = run_probe(program, server, tmp_path)
    assert done.returncode == 1, done.stdout
    assert done.stdout.startswith(f"not ready: {said}"), done.stdout
    assert '"error"' in done.stdout or '"choices"' in done.stdout  # the body's first 500
    assert len(done.stdout) < 1000
    assert KEY not in done.stdout + done.stderr


def test_an_answer_that_does_not_come_in_time_fails(
    program: ProgramRun, server: FakeOpenAI, tmp_path: Path
) -> None:
    """A hang is bounded by the answer timeout (the kubelet's timeoutSeconds bounds the
    whole probe beyond it)."""
    server.delay = 3.0
    done = run_probe(program, server, tmp_path, answer_timeout="1")
    assert done.returncode == 1
    assert done.stdout.startswith(f"not ready: {WORDS}: nothing answered"), done.stdout
    assert done.stdout.count("nothing answered") == 1  # the reason once, not again as the body


def test_without_a_tool_call_parser_only_the_chat_is_asked(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    plain = run_program(STACK, {"tpu-vllm:vllm.toolCallParser": None})
    probe = startup_probe(plain)
    assert "--tool-call" not in probe["exec"]["command"]  # type: ignore[index]
    assert probe["timeoutSeconds"] == 2 * 10 + 120 + 10  # one answer's bound, not two
    done = run_probe(plain, server, tmp_path)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == "ready: the model answered"
    assert server.paths().count("/v1/chat/completions") == 1
