"""One screen on a running stack: `.venv/bin/python -m scripts.status STACK`.

The TPU, the endpoint, its load and the server's startup phase, from what the stack already
knows, in one command instead of five tools. Every network wait is bounded: a node that does
not answer gets a line that says so, never a hang. What each line comes from: docs/operations.md
"Watch it serve".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from components import renewal, vllm_metrics
from components.vm.ssh import SSH_USER
from components.vm.tpu_api import ApiError, TpuApi
from scripts import pulumi_cli

ROOT = Path(__file__).resolve().parent.parent


def _load_wait_ready() -> Any:
    """By path: wait_ready.py is a node-side script, not a package module."""
    spec = importlib.util.spec_from_file_location(
        "wait_ready", ROOT / "scripts" / "remote" / "wait_ready.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wait_ready = _load_wait_ready()

EXIT_NO_OUTPUTS = 2
CONTAINER = "tpu-vllm"  # components/vm/vllm.py CONTAINER
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Each series' value summed by metric name (the text exposition format)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        sums[match.group(1)] = sums.get(match.group(1), 0.0) + value
    return sums


def http_get(url: str, timeout: float, token: str = "") -> tuple[int, str]:
    """(status, body); status 0 and the reason when nothing answered in `timeout`."""
    request = urllib.request.Request(url)  # noqa: S310 - the stack's http:// endpoint
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            return int(answer.status), answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return int(error.code), ""
    except (OSError, ValueError) as error:
        return 0, f"no answer in {timeout:g} s ({type(error).__name__})"


def tpu_lines(outputs: Mapping[str, Any], now: float) -> list[str]:
    queued = str(outputs.get("queued_resource") or "")
    if outputs.get("cluster"):
        return [f"TPU: GKE nodes of {outputs['cluster']} (GKE replaces ended flex-start nodes)"]
    if not queued:
        return ["TPU: no queued resource in the outputs"]
    try:
        found = TpuApi(retry_attempts=1).get_queued_resource(queued)
    except ApiError as error:
        state, end = ("gone (404)" if error.http_status == 404 else f"unknown ({error})"), None
    except Exception as error:  # noqa: BLE001 - credentials or transport: say which
        state, end = f"unknown ({type(error).__name__}: {error})", None
    else:
        state = str(found.get("state", {}).get("state") or "STATE_UNSPECIFIED")
        end = found.get("runDuration", {}).get("terminationTime") or None
    end = end or outputs.get("expires_at") or None
    lines = [f"TPU: {outputs.get('chip', '?')} {queued.rsplit('/', 1)[-1]}: {state}"]
    left = renewal.seconds_left(end, now)
    if left is not None:
        lines.append(
            f"run ends: {end} ({_minutes(left)} left)" if left > 0 else f"run ended: {end}"
        )
        lead = outputs.get("renewal_lead_seconds")
        if lead:
            starts = left - float(lead)
            lines.append(
                f"renewal starts: {_minutes(starts)} from now ({renewal.minutes(float(lead))} "
                "before the end)"
                if starts > 0
                else "renewal: due now (inside the renewal window)"
            )
    else:
        lines.append("run end: none (spot or on-demand: bills until deleted)")
    return lines


def _minutes(seconds: float) -> str:
    return renewal.minutes(max(0.0, seconds))


def endpoint_lines(
    outputs: Mapping[str, Any], timeout: float, window: float, sleep: Callable[[float], None]
) -> list[str]:
    base = str(outputs.get("endpoint_ip") or outputs.get("endpoint") or "")
    if not base:
        return ["endpoint: none in the outputs (no external IP)"]
    status, body = http_get(f"{base}/health", timeout)
    lines = [f"/health: {status if status else body}"]
    status, body = http_get(f"{base}/v1/models", timeout, str(outputs.get("api_key") or ""))
    try:
        served = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
    except (ValueError, AttributeError):
        served = []
    lines.append(
        f"model: {', '.join(map(str, served))}" if served else f"model: /v1/models {status or body}"
    )
    status, first = http_get(f"{base}/metrics", timeout)
    if status != 200:
        return [*lines, f"metrics: /metrics {status or first}"]
    now = parse_metrics(first)
    kv = now.get(vllm_metrics.KV_CACHE_USAGE)
    # On GKE the address balances over the replicas: a scrape sees one of them.
    whose = " (one replica's: the load balancer picked it)" if outputs.get("cluster") else ""
    lines.append(
        f"requests: {now.get(vllm_metrics.RUNNING, 0):g} running, "
        f"{now.get(vllm_metrics.WAITING, 0):g} waiting; KV cache "
        + (f"{kv * 100:.1f} %" if kv is not None else "not reported")
        + whose
    )
    lines.append(_throughput(base, now, timeout, window, sleep))
    return lines


def _throughput(
    base: str, first: Mapping[str, float], timeout: float, window: float,
    sleep: Callable[[float], None],
) -> str:  # fmt: skip
    names = (vllm_metrics.PROMPT_TOKENS, vllm_metrics.GENERATION_TOKENS)
    if window <= 0:
        started = first.get("process_start_time_seconds")
        if not started:
            return "tokens/s: no process_start_time_seconds to average over"
        span = max(1.0, time.time() - started)
        rates = [first.get(n, 0.0) / span for n in names]
        how = f"average since the server started {renewal.minutes(span)} ago"
    else:
        print(f"(measuring tokens/s over {window:g} s ...)", flush=True)
        sleep(window)
        status, text = http_get(f"{base}/metrics", timeout)
        if status != 200:
            return f"tokens/s: the second scrape got {status or text}"
        second = parse_metrics(text)
        start = "process_start_time_seconds"
        if second.get(start) != first.get(start):
            # Counters of two processes do not subtract: another replica (GKE) or a restart.
            return (
                "tokens/s: not measured: another server process answered the second scrape "
                "(a replica behind the same address, or a restart); `--window 0` averages "
                "one server's counters since its start"
            )
        rates = [(second.get(n, 0.0) - first.get(n, 0.0)) / window for n in names]
        how = f"over the last {window:g} s"
    return f"tokens/s: {rates[0]:.1f} prompt, {rates[1]:.1f} generation ({how})"


def startup_phase(
    outputs: Mapping[str, Any], timeout: float, ssh_port: int, ssh_user: str = SSH_USER
) -> str:
    if outputs.get("cluster"):
        return (
            "startup phase: per replica: `kubectl logs -n tpu-vllm-STACK "
            "-l app.kubernetes.io/component=server -c vllm`"
        )
    host = str(outputs.get("external_ip") or "")
    key = str(outputs.get("ssh_private_key") or "")
    if not host or not key:
        return "startup phase: unknown (no node address or SSH key in the outputs)"
    with tempfile.TemporaryDirectory() as tmp:
        key_file, known = Path(tmp) / "key", Path(tmp) / "known_hosts"
        key_file.touch(mode=0o600)
        key_file.write_text(key if key.endswith("\n") else key + "\n")
        pinned = str(outputs.get("ssh_host_key") or "")
        known.write_text(f"[{host}]:{ssh_port} {pinned}\n" if pinned else "")
        argv = [
            "ssh", "-F", "/dev/null", "-T", "-o", "BatchMode=yes",
            "-o", f"StrictHostKeyChecking={'yes' if pinned else 'no'}",
            "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"ConnectTimeout={max(1, int(timeout))}", "-o", "LogLevel=ERROR",
            "-o", "IdentitiesOnly=yes", "-i", str(key_file), "-p", str(ssh_port),
            "-l", ssh_user, "--", host, f"sudo docker logs --tail 2000 {CONTAINER} 2>&1",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout * 3, check=False
            )
        except subprocess.TimeoutExpired:
            return f"startup phase: unknown (the node did not answer SSH in {timeout * 3:g} s)"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"startup phase: unknown (SSH: {reason})"
    phase = wait_ready.FIRST_PHASE
    for line in done.stdout.splitlines():
        for name, pattern in wait_ready.PHASES:
            if pattern.search(line):
                phase = name
        if wait_ready.READY in line:
            phase = "ready: Application startup complete."
    return f"startup phase: {phase}"


def status(stack: str, *, timeout: float, window: float, ssh_port: int = 22,
           ssh_user: str = SSH_USER, say: Callable[[str], None] = print,
           sleep: Callable[[float], None] = time.sleep) -> int:  # fmt: skip
    try:
        outputs = pulumi_cli.stack_outputs(stack, show_secrets=True)
    except pulumi_cli.PulumiCliError as error:
        say(f"status {stack}: the stack's outputs could not be read: {error}")
        return EXIT_NO_OUTPUTS
    say(f"stack {stack}: {outputs.get('endpoint') or '(no endpoint)'}")
    for line in tpu_lines(outputs, time.time()):
        say(f"  {line}")
    for line in endpoint_lines(outputs, timeout, window, sleep):
        say(f"  {line}")
    say(f"  {startup_phase(outputs, timeout, ssh_port, ssh_user)}")
    say(
        "  dashboard: "
        + (outputs.get("dashboard_url") or "none (tpu-vllm:monitoring.enabled is false)")
    )
    if outputs.get("logs_command"):
        say(f"  logs: {outputs['logs_command']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.status",
        description=(
            "One screen on a running stack: its TPU and the time left in its run, the endpoint's "
            "/health, model, load and tokens/s, the server's last startup phase, and its "
            "dashboard and log command. Every network wait is bounded by --timeout."
        ),
        epilog=(
            "Exit status: 0 the screen was shown (a node or endpoint that does not answer is a "
            "line of it, not a failure); 2 the stack's outputs could not be read (`pulumi stack "
            "output` failed: no pulumi CLI, no such stack, not logged in to its backend), or the "
            "arguments are wrong."
        ),
    )
    parser.add_argument(
        "stack",
        metavar="STACK",
        help="the Pulumi stack to show, e.g. v5e1; read with `pulumi stack output --json "
        "--show-secrets -s STACK` (the API key and SSH key stay in memory, never printed)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per request (5)")
    parser.add_argument(
        "--window",
        type=float,
        default=60.0,
        help="seconds between two scrapes (60); 0: since start",
    )
    parser.add_argument("--ssh-port", type=int, default=22, help="the node's SSH port (22)")
    parser.add_argument("--ssh-user", default=SSH_USER, help=f"the node's SSH user ({SSH_USER})")
    args = parser.parse_args(argv)
    return status(args.stack, timeout=args.timeout, window=args.window, ssh_port=args.ssh_port,
                  ssh_user=args.ssh_user)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
