"""Runs on the TPU VM after every (re)start: wait for vLLM to be ready, or fail fast.

A cold start is ~14 minutes, 80% of it XLA compilation (seed 000 §1.4), so the operator needs
to see phases pass rather than a silent wait; and a crash at boot must fail in seconds, not at
the timeout. This follows the log of one container start only (by container id), reports each
phase with elapsed seconds, succeeds on uvicorn's `Application startup complete.`, then checks
`/health` and `/v1/models` with curl (the API key read from its file and handed to curl on
stdin, never in argv or env).

Usage: python3 - --container ID --model MODEL --port PORT --timeout SECONDS [--poll SECONDS]
                 [--cache-result FILE]
The last stdout line is `TPU_VLLM_READY {json}` with startup_seconds, hbm and cache (the
compile-cache restore's result that scripts/remote/xla_cache.py wrote to FILE).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

READY = "Application startup complete."
API_KEY_FILE = os.path.expanduser("~/.tpu-vllm/secrets/vllm_api_key")
TAIL_LINES = 50
# (phase, pattern) in the order a healthy boot shows them; each is reported once.
PHASES = (
    (
        "weights downloaded",
        re.compile(r"Time spent downloading weights|Loading weights took|Model loading took"),
    ),
    ("Memory statistics (HBM budget)", re.compile(r"Memory statistics")),
    (
        "KV cache initialised",
        re.compile(r"Init kv-cache|GPU KV cache size|num_gpu_blocks|KV cache (?:size|blocks)"),
    ),
    ("compiling (the long part: XLA)", re.compile(r"Precompil|Compiling |Compilation of ")),
    ("server starting", re.compile(r"Started server process|Waiting for application startup")),
)
HBM_RE = re.compile(
    r"Memory statistics.*?total_hbm_limit_gb=(?P<total>[\d.]+)GiB.*?"
    r"total_hbm_limit_cap_gb=(?P<usable>[\d.]+)GiB.*?total_hbm_used_gb=(?P<used>[\d.]+)GiB.*?"
    r"total_hbm_avail_gb=(?P<available>[\d.]+)GiB"
)


def say(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:6.0f}s] {message}", flush=True)


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sudo", "docker", *args], capture_output=True, text=True, check=False, timeout=60
    )


def inspect(container: str) -> tuple[str, str, int, str] | None:
    """(status, exit code, restart count, started at), or None if the container is gone.

    Plain `docker inspect` JSON rather than a Go template: every docker answers it the same.
    """
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
    """Stream `docker logs -f` of this container into the queue; None when it ends."""
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


def http_get(url: str, api_key: str | None = None) -> tuple[bool, str]:
    """(2xx?, body) from curl on the VM. The key goes in as a header on curl's stdin
    (`--header @-`), never as an argument, so `ps` cannot show it."""
    header = f"Authorization: Bearer {api_key}\n" if api_key else ""
    done = subprocess.run(
        ["curl", "--silent", "--fail", "--max-time", "10", "--header", "@-", url],
        input=header,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return done.returncode == 0, done.stdout


def verify_endpoint(start: float, port: int, model: str, tail: collections.deque[str]) -> None:
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    healthy, _ = http_get(f"{base}/health")
    while not healthy and time.monotonic() < deadline:
        time.sleep(1)
        healthy, _ = http_get(f"{base}/health")
    if not healthy:
        fail(start, "/health did not answer 200 after startup complete", tail)
    say(start, "/health: 200")
    with open(API_KEY_FILE, encoding="utf-8") as handle:
        ok, body = http_get(f"{base}/v1/models", handle.read().strip())
    try:
        served = [m.get("id") for m in json.loads(body).get("data", [])] if ok else []
    except (ValueError, AttributeError):
        served = []
    if model not in served:
        answer = "an error (is the API key right?)" if not ok else f"{served}"
        fail(start, f"/v1/models answered {answer} and does not list {model}", tail)
    say(start, f"/v1/models lists {model}")


def read_cache_result(path: str) -> dict[str, object]:
    """The restore's result for this start; not restored when there is none."""
    result: dict[str, object] = {
        "restored": False, "files": 0, "bytes": 0, "seconds": 0.0, "generation": "",
        "reason": "no restore result on the node",
    }  # fmt: skip
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            result.update(json.load(handle))
    except (OSError, ValueError, TypeError):
        pass
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--container", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--cache-result", default="")
    args = parser.parse_args()
    start = time.monotonic()
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
    hbm: dict[str, float] | None = None
    next_check = time.monotonic() + args.poll
    ended = False
    while True:
        try:
            line = lines.get(timeout=min(args.poll, 0.5))
        except queue.Empty:
            line = ""
        if line is None:
            ended = True
        elif line:
            tail.append(line)
            for phase, pattern in PHASES:
                if phase not in seen and pattern.search(line):
                    seen.add(phase)
                    say(start, phase)
            match = HBM_RE.search(line)
            if match and hbm is None:
                hbm = {f"{k}_gib": float(v) for k, v in match.groupdict().items()}
                say(start, "HBM: " + ", ".join(f"{k} {v} GiB" for k, v in hbm.items()))
            if READY in line:
                say(start, "ready: Application startup complete.")
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
    began = parse_started(started_at)
    startup = round(time.time() - began, 1) if began else round(time.monotonic() - start, 1)
    verify_endpoint(start, args.port, args.model, tail)
    cache = read_cache_result(args.cache_result)
    warm = f"warm: {cache['files']} files from {cache['generation']}" if cache["restored"] else ""
    say(start, f"compile cache: {warm or 'cold (' + str(cache.get('reason') or '') + ')'}")
    result = {"startup_seconds": startup, "hbm": hbm, "cache": cache}
    print("TPU_VLLM_READY " + json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
