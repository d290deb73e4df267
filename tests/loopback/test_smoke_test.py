"""scripts/smoke_test.py, run as a real subprocess against the loopback vLLM OpenAI fake.

Every run checks that the API key sentinel never shows up in the script's argv, stdout or
stderr. The ``pulumi stack output`` path runs a fake ``pulumi`` executable written into a
temporary directory that is the only entry on PATH besides nothing: the real CLI is never used.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.fakes.openai_server import (
    DEFAULT_REPLY,
    MALFORMED_VARIANTS,
    FakeOpenAI,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = "scripts.smoke_test"
SENTINEL = "sk-SENTINEL-5d2c9e7a1f0b4c83a6e1d9f2b7c4a0e8x"  # 48 characters, like the stack's
RUN_TIMEOUT = 30
STACK = "v5e1"
PULUMI_ARGV = ["stack", "output", "--json", "--show-secrets", "-s", STACK]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]


def run_script(
    *args: str,
    key: str | None = SENTINEL,
    stdin: str = "",
    path: str | None = None,
    timeout: float = RUN_TIMEOUT,
) -> Result:
    """Run the script with a clean environment; ``key`` goes in $TPU_VLLM_API_KEY."""
    env = {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/nonexistent"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    if key is not None:
        env["TPU_VLLM_API_KEY"] = key
    argv = [sys.executable, "-m", MODULE, *args]
    assert not any(SENTINEL in a for a in argv)
    proc = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    assert SENTINEL not in result.stdout, result.stdout
    assert SENTINEL not in result.stderr, result.stderr
    return result


@pytest.fixture
def fake(fake_openai: FakeOpenAI) -> FakeOpenAI:
    fake_openai.api_key = SENTINEL
    return fake_openai


def explicit(fake: FakeOpenAI, *extra: str) -> list[str]:
    return ["--base-url", fake.base_url, "--model", fake.model, *extra]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --------------------------------------------------------------------------------------------
# The fake itself behaves like vLLM's server.


def test_fake_serves_vllm_shapes(fake: FakeOpenAI) -> None:
    auth = {"Authorization": f"Bearer {SENTINEL}"}
    models = requests.get(f"{fake.base_url}/models", headers=auth, timeout=5).json()
    assert models["object"] == "list" and models["data"][0]["id"] == fake.model

    body = {"model": fake.model, "messages": [{"role": "user", "content": "hi"}]}
    chat = requests.post(f"{fake.base_url}/chat/completions", json=body, headers=auth, timeout=5)
    answer = chat.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert answer["choices"][0]["message"]["tool_calls"] == []
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert set(answer["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}

    completion = requests.post(
        f"{fake.base_url}/completions",
        json={"model": fake.model, "prompt": "Say hi"},
        headers=auth,
        timeout=5,
    ).json()
    assert completion["choices"][0]["text"] == ""  # seed 000's trap

    denied = requests.post(f"{fake.base_url}/chat/completions", json=body, timeout=5)
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
    fake.auth_error_shape = "openai"
    denied = requests.post(f"{fake.base_url}/chat/completions", json=body, timeout=5)
    assert denied.status_code == 401 and denied.json()["error"]["code"] == 401

    wrong_model = requests.post(
        f"{fake.base_url}/chat/completions", json={**body, "model": "x"}, headers=auth, timeout=5
    )
    assert wrong_model.status_code == 404
    assert wrong_model.json()["error"]["type"] == "NotFoundError"


# --------------------------------------------------------------------------------------------
# Explicit --base-url / --model, key from the environment or stdin.


def test_all_checks_pass(fake: FakeOpenAI) -> None:
    result = run_script(*explicit(fake))
    assert result.code == 0, result.stdout + result.stderr
    passes = result.lines("PASS")
    assert len(passes) == 2, result.stdout
    assert re.fullmatch(r'PASS chat \d+\.\d\d s "Hi there, how are you\?"', passes[0])
    assert re.fullmatch(r'PASS tool-call \d+\.\d\d s get_weather\(\{"city": "Paris"\}\)', passes[1])
    assert not result.lines("FAIL")
    assert "OK: 2 of 2" in result.stdout

    # Exactly one chat and one tool call, both on /chat/completions, never /v1/completions.
    assert fake.paths() == ["/v1/chat/completions", "/v1/chat/completions"]
    chat, tool = (r.body for r in fake.requests)
    assert all(r.headers["Authorization"] == f"Bearer {SENTINEL}" for r in fake.requests)
    assert chat["model"] == fake.model and "tools" not in chat
    assert chat["max_tokens"] <= 256  # short: the budget the node's readiness check uses too
    assert tool["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in tool["tools"]] == ["get_weather"]
    assert tool["tools"][0]["function"]["parameters"]["required"] == ["city"]


def test_key_from_stdin(fake: FakeOpenAI) -> None:
    result = run_script(*explicit(fake), key=None, stdin=SENTINEL + "\n")
    assert result.code == 0, result.stdout + result.stderr
    assert len(result.lines("PASS")) == 2


def test_no_key_is_a_setup_error(fake: FakeOpenAI) -> None:
    result = run_script(*explicit(fake), key=None, stdin="")
    assert result.code == 2
    assert "no API key" in result.stderr and "TPU_VLLM_API_KEY" in result.stderr
    assert fake.requests == []


@pytest.mark.parametrize("shape", ["vllm", "openai"])
def test_wrong_key_is_an_auth_failure(fake: FakeOpenAI, shape: Any) -> None:
    fake.auth_error_shape = shape
    result = run_script(*explicit(fake), key="not-the-key")
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "401" in fail and "api_key output" in fail and "rotated" in fail
    assert result.lines("SKIP tool-call")
    assert "not-the-key" not in result.stdout + result.stderr


EXPECTED_PROBLEM = {
    "non_json": 'arguments are not JSON: "{city: Paris"',
    "wrong_name": 'called "get_time", expected "get_weather"',
    "no_tool_calls": "no tool_calls in the answer",
    "wrong_finish_reason": 'finish_reason is "stop", expected "tool_calls"',
    "missing_argument": 'arguments have no "city"',
}


@pytest.mark.parametrize("variant", MALFORMED_VARIANTS)
def test_malformed_tool_call_fails(fake: FakeOpenAI, variant: Any) -> None:
    fake.malformed_tool_call = variant
    result = run_script(*explicit(fake))
    assert result.code == 1
    assert len(result.lines("PASS chat")) == 1
    (fail,) = result.lines("FAIL tool-call")
    assert re.match(r"FAIL tool-call \d+\.\d\d s: ", fail)
    assert EXPECTED_PROBLEM[variant] in fail, fail
    assert "FAILED: 1 of 2" in result.stdout


def test_empty_content_fails(fake: FakeOpenAI) -> None:
    fake.empty_content = True
    result = run_script(*explicit(fake))
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "content is empty" in fail


def test_reasoning_only_still_fails(fake: FakeOpenAI) -> None:
    fake.empty_content = True
    fake.reasoning = "The user wants a greeting of five words."
    result = run_script(*explicit(fake))
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "content is empty" in fail and "reasoning" in fail


def test_reasoning_beside_content_passes(fake: FakeOpenAI) -> None:
    fake.reasoning = "Five words, friendly."
    result = run_script(*explicit(fake))
    assert result.code == 0, result.stdout


def test_connection_refused_names_the_firewall() -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    result = run_script("--base-url", base, "--model", "m", "--timeout", "5")
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "refused" in fail
    assert "tpu-vllm:access.allowedCidrs" in fail
    assert base.removesuffix("/v1") in fail
    assert result.lines("SKIP tool-call")


def test_slow_server_times_out(fake: FakeOpenAI) -> None:
    fake.delay = 1.5
    result = run_script(*explicit(fake, "--timeout", "0.3"))
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "no answer within 0.3 s" in fail
    assert len(fake.requests) <= 1  # the tool call is skipped, not run into the same wall


def test_wrong_model_names_it(fake: FakeOpenAI) -> None:
    result = run_script("--base-url", fake.base_url, "--model", "google/gemma-4-31B-it")
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "404" in fail and "google/gemma-4-31B-it" in fail


def test_base_url_without_v1_is_explained(fake: FakeOpenAI) -> None:
    result = run_script("--base-url", fake.url, "--model", fake.model)
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "404" in fail and "/v1" in fail


def test_server_without_auto_tool_choice(fake: FakeOpenAI) -> None:
    fake.auto_tool_choice = False
    result = run_script(*explicit(fake))
    assert result.code == 1
    (fail,) = result.lines("FAIL tool-call")
    assert "HTTP 400" in fail and "--enable-auto-tool-choice" in fail


def test_needs_a_stack_or_explicit_target() -> None:
    result = run_script(key=None)
    assert result.code == 2
    assert "STACK" in result.stderr and "--base-url" in result.stderr


# --------------------------------------------------------------------------------------------
# The `pulumi stack output` path, with a fake pulumi executable.


FAKE_PULUMI = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
with open(os.path.join(here, "behaviour.json")) as f:
    behaviour = json.load(f)
sys.stderr.write(behaviour.get("stderr", ""))
if "outputs" in behaviour:
    sys.stdout.write(json.dumps(behaviour["outputs"], indent=4) + "\\n")
sys.exit(behaviour.get("code", 0))
"""


def fake_pulumi(directory: Path, **behaviour: Any) -> Path:
    """Write a ``pulumi`` executable into ``directory`` that records its calls."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "pulumi"
    exe.write_text(FAKE_PULUMI.format(python=sys.executable), encoding="utf-8")
    exe.chmod(0o755)
    (directory / "behaviour.json").write_text(json.dumps(behaviour), encoding="utf-8")
    return directory


def pulumi_calls(directory: Path) -> list[dict[str, Any]]:
    log = directory / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def stack_outputs(fake: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "endpoint": fake.url,
        "openai_base_url": fake.base_url,
        "model": fake.model,
        "api_key": SENTINEL,
        "api_key_secret": "projects/p/secrets/tpu-vllm-v5e1-api-key",
        "expires_at": None,
        **extra,
    }


def test_stack_outputs_are_used(fake: FakeOpenAI, tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path / "bin", outputs=stack_outputs(fake))
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 0, result.stdout + result.stderr
    assert len(result.lines("PASS")) == 2
    assert f"(stack {STACK})" in result.stdout

    (call,) = pulumi_calls(bin_dir)
    assert call["argv"] == PULUMI_ARGV
    assert not any(SENTINEL in arg for arg in call["argv"])
    assert not any(SENTINEL in value for value in call["env"].values())
    # The key the server saw came from pulumi's stdout.
    assert {r.headers["Authorization"] for r in fake.requests} == {f"Bearer {SENTINEL}"}


def test_stack_key_mismatch_blames_the_output(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.api_key = "the-renewed-key"
    bin_dir = fake_pulumi(tmp_path / "bin", outputs=stack_outputs(fake))
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert f"api_key output of stack {STACK}" in fail and f"-s {STACK}" in fail


def test_expired_stack_suggests_refresh(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{closed_port()}"
    outputs = {
        "openai_base_url": f"{base}/v1",
        "model": "google/gemma-4-E2B-it",
        "api_key": SENTINEL,
        "expires_at": "2020-01-01T00:00:00Z",
    }
    bin_dir = fake_pulumi(tmp_path / "bin", outputs=outputs)
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 1
    (fail,) = result.lines("FAIL chat")
    assert "allowedCidrs" in fail and f"pulumi up --refresh -s {STACK}" in fail


def test_stack_without_outputs(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path / "bin", outputs={})
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 2
    assert f"stack {STACK} has no outputs" in result.stderr
    assert f"pulumi up -s {STACK}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_stack_without_endpoint_output(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path / "bin", outputs={"zone": "us-west4-a", "api_key": SENTINEL})
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 2
    assert "no openai_base_url output" in result.stderr


def test_pulumi_error_is_reported(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(
        tmp_path / "bin", code=255, stderr=f"error: no stack named '{STACK}' found\n"
    )
    result = run_script(STACK, key=None, path=str(bin_dir))
    assert result.code == 2
    assert f"no stack named '{STACK}' found" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_pulumi_cli(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_script(STACK, key=None, path=str(empty))
    assert result.code == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "pulumi CLI is not on PATH" in line and "--base-url" in line
