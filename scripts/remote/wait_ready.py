"""Runs on the TPU VM after every (re)start: wait for vLLM to be ready, or fail fast.

A cold start is ~14 minutes, most of it XLA compilation, so the operator sees phases pass rather
than a silent wait, and a crash at boot fails in seconds, not at the timeout. Ready means the
model answered, not only that the server started: a build can start and answer garbage
(tpu-inference #3406). `probe` runs the same checks once, as GKE's startup probe. What it
checks, and its interface: docs/server.md "Start and readiness".
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import http.client
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

READY = "Application startup complete."  # uvicorn/lifespan/on.py, see PHASES below
API_KEY_FILE = os.path.expanduser("~/.tpu-vllm/secrets/vllm_api_key")
TAIL_LINES = 50
#: pulumi-command sends no SSH keepalives, and a NAT or proxy may drop a session idle through
#: ~685 s of compilation.
HEARTBEAT_SECONDS = 20.0
FIRST_PHASE = "container started"
HEALTH_PHASE = "startup complete, /health not 200 yet"
# In the order a healthy boot shows them. Each pattern matches a line really logged by the file
# named beside it.
PHASES = (
    (
        "weights downloaded",
        re.compile(
            # vllm/model_executor/model_loader/weight_utils.py (only downloads over 0.5 s)
            r"Time spent downloading weights for "
            # vllm/model_executor/model_loader/default_loader.py (tpu-inference's loader calls it)
            r"|Loading weights took "
            # tpu_inference/runner/tpu_runner.py
            r"|Init model \| hbm="
        ),
    ),
    (
        "Memory statistics (HBM budget)",
        # tpu_inference/worker/tpu_worker.py
        re.compile(r"Memory statistics \| "),
    ),
    (
        "KV cache initialised",
        re.compile(
            # vllm/v1/core/kv_cache_utils.py
            r"GPU KV cache size: "
            # tpu_inference/runner/kv_cache_manager.py
            r"|Init kv-cache \| "
        ),
    ),
    (
        "compiling (the long part: XLA)",
        # tpu_inference/runner/compilation_manager.py
        re.compile(r"Precompile |Compilation of .* finished in "),
    ),
    (
        "server starting",
        re.compile(
            # uvicorn/server.py
            r"Started server process "
            # uvicorn/lifespan/on.py
            r"|Waiting for application startup\."
        ),
    ),
)
#: scripts/smoke_test.py imports the questions from here.
CHAT_PROMPT = "Say hi in five words."  # seed 000 §1.4
CHAT_MAX_TOKENS = 256
TOOL_NAME = "get_weather"
TOOL_ARGUMENT = "city"
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
TOOL_MAX_TOKENS = 256
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    TOOL_ARGUMENT: {"type": "string", "description": "City name, e.g. Paris"}
                },
                "required": [TOOL_ARGUMENT],
            },
        },
    }
]
#: A warm server answers these in about a second on a TPU.
ANSWER_TIMEOUT_SECONDS = 120.0
BODY_CHARS = 500
# tpu_inference/worker/tpu_worker.py f-strings each figure as f"{total_hbm_limit_gb=}GiB".
HBM_RE = re.compile(
    r"Memory statistics.*?total_hbm_limit_gb=(?P<total>[\d.]+)GiB.*?"
    r"total_hbm_limit_cap_gb=(?P<usable>[\d.]+)GiB.*?total_hbm_used_gb=(?P<used>[\d.]+)GiB.*?"
    r"total_hbm_avail_gb=(?P<available>[\d.]+)GiB"
)


class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last_line = self.start


CLOCK = Clock()


def say(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:6.0f}s] {message}", flush=True)
    CLOCK.last_line = time.monotonic()


def heartbeat(start: float, phase: str, tail: collections.deque[str]) -> None:
    """So the session is never idle and the operator sees progress."""
    last = tail[-1].strip()[:200] if tail else "(no log line yet)"
    say(start, f"still waiting, phase: {phase}; last log line: {last}")


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sudo", "docker", *args], capture_output=True, text=True, check=False, timeout=60
    )


def inspect(container: str) -> tuple[str, str, int, str] | None:
    """(status, exit code, restart count, started at), or None if the container is gone.
    JSON, not a Go template: every docker answers it the same."""
    done = docker("inspect", container)
    if done.returncode != 0:
        return None
    try:
        data = json.loads(done.stdout)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    state = data.get("State") or {}
    return (
        str(state.get("Status", "")),
        str(state.get("ExitCode", "")),
        int(data.get("RestartCount") or 0),
        str(state.get("StartedAt", "")),
    )


def parse_started(text: str) -> float | None:
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?", text)
    if not match:
        return None
    when = dt.datetime.fromisoformat(match.group(1)).replace(tzinfo=dt.timezone.utc)  # noqa: UP017 - the VM may run Python 3.10
    return when.timestamp() + float(f"0.{match.group(2) or 0}")


def fail(start: float, reason: str, tail: collections.deque[str]) -> None:
    say(start, f"FAILED: {reason}")
    print(f"--- last {len(tail)} log lines ---", file=sys.stderr)
    for line in tail:
        print(line, file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(1)


def follow(container: str, lines: queue.Queue[str | None]) -> None:
    proc = subprocess.Popen(
        ["sudo", "docker", "logs", "-f", container],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    proc.wait()
    lines.put(None)


def http_get(url: str, api_key: str | None = None) -> tuple[int, str]:
    """(HTTP status, body); status 0 when nothing answered. The key goes on curl's stdin, so
    `ps` cannot show it."""
    header = f"Authorization: Bearer {api_key}\n" if api_key else ""
    done = subprocess.run(
        [
            "curl",
            "--silent",
            "--max-time",
            "10",
            "--header",
            "@-",
            "--write-out",
            "\n%{http_code}",
            url,
        ],
        input=header,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    body, _, code = done.stdout.rpartition("\n")
    return (int(code) if code.isdigit() else 0), body


#: curl(1), EXIT CODES.
CURL_EXITS = {7: "connection refused", 28: "no answer within the time allowed", 52: "empty reply"}
#: Special tokens printed as text, as a broken build emits them (the gemma4 parsers turn off
#: skip_special_tokens).
MARKUP = re.compile(r"<pad>|<unused\d+>|<\|[^>]*>|<[a-z_]*_of_turn>|<bos>|<eos>")


def ask(
    start: float,
    base: str,
    key: str,
    body: dict[str, object],
    *,
    seconds: float,
    beat: float,
    tail: collections.deque[str],
) -> tuple[int, str, dict[str, Any], dict[str, Any]]:
    """(status, raw body, first choice, its message); status 0: nothing answered, the reason in
    the raw body."""
    header = f"Authorization: Bearer {key}\n"
    proc = subprocess.Popen(
        [
            "curl",
            "--silent",
            "--max-time",
            str(seconds),
            "--header",
            "@-",
            "--header",
            "Content-Type: application/json",
            "--data-binary",
            json.dumps(body),
            "--write-out",
            "\n%{http_code}",
            f"{base}/v1/chat/completions",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(header)
    proc.stdin.close()
    deadline = time.monotonic() + seconds + 20
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        if time.monotonic() - CLOCK.last_line >= beat:
            heartbeat(start, "asking the model, waiting for its answer", tail)
    if proc.poll() is None:
        proc.kill()
    raw_out = proc.stdout.read()
    answer, _, code = raw_out.rpartition("\n")
    status = int(code) if code.isdigit() else 0
    if status == 0:
        why = CURL_EXITS.get(proc.returncode or 0, f"curl exit status {proc.returncode}")
        return 0, f"nothing answered ({why})", {}, {}
    return (status, answer, *first_choice(answer))


def first_choice(answer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        choice = json.loads(answer)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        choice = {}
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message")
    return choice, message if isinstance(message, dict) else {}


def _status_problem(status: int, raw: str) -> str | None:
    if status == 0:
        return raw
    return None if status == 200 else f"HTTP {status}"


def chat_problem(
    status: int, raw: str, choice: dict[str, Any], message: dict[str, Any]
) -> str | None:
    """Why the chat answer is not a good one, or None: it needs a word and no special-token
    markup (a broken build answers garbage)."""
    problem = _status_problem(status, raw)
    if problem:
        return problem
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
        return (
            f"HTTP 200 with empty content ({json.dumps(content)}; finish_reason "
            f"{json.dumps(choice.get('finish_reason'))}, {len(str(reasoning))} characters of "
            "reasoning)"
        )
    if MARKUP.search(content) or not re.search(r"[A-Za-z]{2,}", content):
        return f"HTTP 200 with content that is no answer: {json.dumps(content)[:120]}"
    return None


def tool_problem(status: int, raw: str, message: dict[str, Any]) -> str | None:
    """Why the tool answer is not a good call, or None. vLLM's gemma4 parser hands back `{}`
    for a call it could not parse, so the argument itself is what proves the call."""
    problem = _status_problem(status, raw)
    if problem:
        return problem
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        text = json.dumps(message.get("content"))[:80]
        return f"HTTP 200 without a tool call (content {text}): no --tool-call-parser match"
    function = calls[0].get("function") or {}
    if function.get("name") != TOOL_NAME:
        return f"HTTP 200 calling {json.dumps(function.get('name'))}, not {TOOL_NAME}"
    shown = json.dumps(function.get("arguments"))[:80]
    try:
        arguments = json.loads(str(function.get("arguments")))
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return f"HTTP 200 with a {TOOL_NAME} call whose arguments are not a JSON object: {shown}"
    value = arguments.get(TOOL_ARGUMENT)
    if not isinstance(value, str) or not value.strip():
        return f"HTTP 200 with a {TOOL_NAME} call without a {TOOL_ARGUMENT}: {shown}"
    return None


def question_bodies(model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same on the VM and in GKE's readiness Job (components/gke/readiness_manifests.py)."""
    common = {"model": model, "temperature": 0,
              "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip
    chat = {**common, "messages": [{"role": "user", "content": CHAT_PROMPT}],
            "max_tokens": CHAT_MAX_TOKENS}  # fmt: skip
    tools = {**common, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": TOOLS,
             "tool_choice": "auto", "max_tokens": TOOL_MAX_TOKENS}  # fmt: skip
    return chat, tools


def ask_model(
    start: float,
    base: str,
    model: str,
    tail: collections.deque[str],
    *,
    tool_call: bool,
    seconds: float,
    beat: float,
) -> float:
    """When (monotonic) the first good answer came. Thinking is turned off for both questions:
    a thought the token budget cuts short leaves `content` empty."""
    with open(API_KEY_FILE, encoding="utf-8") as handle:
        key = handle.read().strip()
    chat, tools = question_bodies(model)
    status, raw, choice, message = ask(
        start, base, key, chat, seconds=seconds, beat=beat, tail=tail
    )
    problem = chat_problem(status, raw, choice, message)
    if problem:
        said = f"the model did not answer {CHAT_PROMPT!r}: {problem}"
        fail(start, f"{said}: {raw[:BODY_CHARS]}", tail)
    answered = time.monotonic()
    say(start, f"the model answered: {json.dumps(message['content'].strip())[:80]}")
    if not tool_call:
        say(start, "tool call not asked: the server has no --tool-call-parser")
        return answered
    status, raw, _, message = ask(start, base, key, tools, seconds=seconds, beat=beat, tail=tail)
    problem = tool_problem(status, raw, message)
    if problem:
        fail(start, f"the model did not call {TOOL_NAME}: {problem}: {raw[:BODY_CHARS]}", tail)
    say(start, f"the model called {TOOL_NAME} with a {TOOL_ARGUMENT}")
    return answered


def models_failure(status: int, container: str) -> str:
    """A 401/403 means the server and this check hold different keys: vLLM's
    AuthenticationMiddleware, and the container reads the key once."""
    if status in (401, 403):
        return (
            f"/v1/models answered HTTP {status}: the API key is the likely cause. The server "
            f"was started with another key than {API_KEY_FILE} (a wrong or rotated key), so "
            "clients with the stack's api_key would be refused too. Fix: restart the server so "
            f"it reads the current key (`sudo docker restart {container[:12]}` on the node), "
            "then run `pulumi up` again"
        )
    answer = f"HTTP {status}" if status else "nothing (no connection or a timeout)"
    return (
        f"/v1/models answered {answer} after /health was 200, so the endpoint cannot be shown "
        "to list the model (is the API key right?)"
    )


def verify_endpoint(
    start: float,
    port: int,
    model: str,
    tail: collections.deque[str],
    beat: float,
    *,
    container: str,
) -> None:
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    healthy = http_get(f"{base}/health")[0] == 200
    while not healthy and time.monotonic() < deadline:
        time.sleep(min(1.0, beat))
        if time.monotonic() - CLOCK.last_line >= beat:
            heartbeat(start, HEALTH_PHASE, tail)
        healthy = http_get(f"{base}/health")[0] == 200
    if not healthy:
        fail(start, "/health did not answer 200 after startup complete", tail)
    say(start, "/health: 200")
    with open(API_KEY_FILE, encoding="utf-8") as handle:
        status, body = http_get(f"{base}/v1/models", handle.read().strip())
    if status != 200:
        fail(start, models_failure(status, container), tail)
    try:
        served = [m.get("id") for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        served = []
    if model not in served:
        fail(start, f"/v1/models answered {served} and does not list {model}", tail)
    say(start, f"/v1/models lists {model}")


def read_cache_result(path: str) -> dict[str, object]:
    """The restore's result for this start; not restored when there is none."""
    result: dict[str, object] = {
        "restored": False, "files": 0, "bytes": 0, "seconds": 0.0, "generation": "",
        "reason": "no restore result on the node",
    }  # fmt: skip
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            found = dict(json.load(handle))
    except (OSError, ValueError, TypeError):
        return result
    # A clean restore writes no `reason`.
    return {**result, "reason": "", **found}


PROBE_HTTP_SECONDS = 10.0


def probe_http(
    url: str, *, key: str = "", body: dict[str, Any] | None = None, seconds: float
) -> tuple[int, str]:
    """(HTTP status, body); status 0 when nothing answered. urllib, not curl: the probe runs in
    the server's image, which has Python (tpu-inference `docker/Dockerfile`)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 - http://127.0.0.1 only
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=seconds) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        try:
            return error.code, error.read().decode(errors="replace")
        except (http.client.HTTPException, OSError):
            return error.code, ""
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        reason = getattr(error, "reason", None) or f"{type(error).__name__}: {error}"
        return 0, f"nothing answered ({reason})"


def probe(port: int, model: str, key_file: str, *, tool_call: bool, seconds: float) -> str | None:
    """Why the local server is not ready, or None. As GKE's startup probe, a build that starts
    but cannot answer never takes traffic, and a rolling update waits for an answer."""
    base = f"http://127.0.0.1:{port}"
    status, raw = probe_http(f"{base}/health", seconds=PROBE_HTTP_SECONDS)
    if status == 0:
        # vLLM listens only once it has compiled.
        return f"/health: {raw}: the server is not up yet"
    if status != 200:
        # vllm/entrypoints/serve/instrumentator/health.py: EngineDeadError.
        dead = ": vLLM's answer once its engine has died" if status == 503 else ""
        return f"/health: HTTP {status}{dead}"
    try:
        with open(key_file, encoding="utf-8") as handle:
            key = handle.read().strip()
    except OSError as error:
        return f"cannot read the API key file {key_file}: {error.strerror}"
    status, raw = probe_http(f"{base}/v1/models", key=key, seconds=PROBE_HTTP_SECONDS)
    if status in (401, 403):
        return (
            f"/v1/models answered HTTP {status}: the API key is the likely cause (the server "
            f"holds another key than {key_file})"
        )
    if status != 200:
        return f"/v1/models: {raw if status == 0 else f'HTTP {status}'}"
    try:
        served = [m.get("id") for m in json.loads(raw).get("data", [])]
    except (ValueError, AttributeError):
        served = []
    if model not in served:
        return f"/v1/models answered {served} and does not list {model}"
    chat, tools = question_bodies(model)
    url = f"{base}/v1/chat/completions"
    status, raw = probe_http(url, key=key, body=chat, seconds=seconds)
    problem = chat_problem(status, raw, *first_choice(raw))
    if problem:
        return f"the model did not answer {CHAT_PROMPT!r}: {_quoted(problem, status, raw)}"
    if tool_call:
        status, raw = probe_http(url, key=key, body=tools, seconds=seconds)
        problem = tool_problem(status, raw, first_choice(raw)[1])
        if problem:
            return f"the model did not call {TOOL_NAME}: {_quoted(problem, status, raw)}"
    return None


def _quoted(problem: str, status: int, raw: str) -> str:
    return problem if status == 0 else f"{problem}: {raw[:BODY_CHARS]}"


def probe_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wait_ready.py probe")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-file", required=True)
    parser.add_argument("--tool-call", action="store_true")
    parser.add_argument("--answer-timeout", type=float, default=ANSWER_TIMEOUT_SECONDS)
    args = parser.parse_args(argv)
    problem = probe(
        args.port,
        args.model,
        args.api_key_file,
        tool_call=args.tool_call,
        seconds=args.answer_timeout,
    )
    # The kubelet keeps this line as the probe's output: the pod's events show it.
    called = f" and called {TOOL_NAME}" if args.tool_call else ""
    print(f"not ready: {problem}" if problem else f"ready: the model answered{called}")
    return 1 if problem else 0


def main() -> None:
    if sys.argv[1:2] == ["probe"]:
        sys.exit(probe_main(sys.argv[2:]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--container", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT_SECONDS)
    parser.add_argument("--cache-result", default="")
    parser.add_argument("--tool-call", action="store_true")
    parser.add_argument("--answer-timeout", type=float, default=ANSWER_TIMEOUT_SECONDS)
    args = parser.parse_args()
    start = CLOCK.start
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    first = inspect(args.container)
    if first is None:
        fail(start, f"container {args.container} does not exist", tail)
    assert first is not None
    started_at = first[3]
    say(start, f"image present; following container {args.container[:12]} started {started_at}")
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=follow, args=(args.container, lines), daemon=True).start()
    seen: set[str] = set()
    phase = FIRST_PHASE
    hbm: dict[str, float] | None = None
    next_check = time.monotonic() + args.poll
    ready_at = time.monotonic()
    ended = False
    while True:
        try:
            line = lines.get(timeout=min(args.poll, args.heartbeat, 0.5))
        except queue.Empty:
            line = ""
        if line is None:
            ended = True
        elif line:
            tail.append(line)
            for name, pattern in PHASES:
                if name not in seen and pattern.search(line):
                    seen.add(name)
                    phase = name
                    say(start, name)
            match = HBM_RE.search(line)
            if match and hbm is None:
                hbm = {f"{k}_gib": float(v) for k, v in match.groupdict().items()}
                say(start, "HBM: " + ", ".join(f"{k} {v} GiB" for k, v in hbm.items()))
            if READY in line:
                say(start, "ready: Application startup complete.")
                ready_at = time.monotonic()
                break
        if ended or time.monotonic() >= next_check:
            next_check = time.monotonic() + args.poll
            state = inspect(args.container)
            if state is None:
                fail(start, "the container was removed", tail)
            assert state is not None
            status, code, restarts, now_started = state
            if status == "restarting":
                fail(start, f"the container restarted (it exited with code {code})", tail)
            if status != "running":
                fail(start, f"the container {status} with exit code {code}", tail)
            if restarts or now_started != started_at:
                fail(start, f"the container restarted (restart count {restarts})", tail)
            if ended:
                fail(start, "the log ended while the container runs", tail)
        if time.monotonic() - start > args.timeout:
            fail(start, f"not ready after {args.timeout:.0f} s (vllm.readinessTimeout)", tail)
        if time.monotonic() - CLOCK.last_line >= args.heartbeat:
            heartbeat(start, phase, tail)
    began = parse_started(started_at)
    startup = round(time.time() - began, 1) if began else round(time.monotonic() - start, 1)
    verify_endpoint(start, args.port, args.model, tail, args.heartbeat, container=args.container)
    base = f"http://127.0.0.1:{args.port}"
    answered = ask_model(
        start,
        base,
        args.model,
        tail,
        tool_call=args.tool_call,
        seconds=args.answer_timeout,
        beat=args.heartbeat,
    )
    first_answer = round(answered - ready_at, 1)
    cache = read_cache_result(args.cache_result)
    warm = f"warm: {cache['files']} files from {cache['generation']}" if cache["restored"] else ""
    say(start, f"compile cache: {warm or 'cold (' + str(cache.get('reason') or '') + ')'}")
    result = {
        "startup_seconds": startup,
        "first_answer_seconds": first_answer,
        "hbm": hbm,
        "cache": cache,
    }
    print("TPU_VLLM_READY " + json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
