"""The server container's probes: the startup probe asks the model, the others watch /health.

Apart from components/gke/k8s_manifests.py, which mounts the scripts (`scripts_dir`) and the
secrets (`secrets_dir`) the startup probe reads.
"""

from __future__ import annotations

import math
from typing import Any

from components import remote_scripts
from components.config import WorkloadSections
from scripts.remote import wait_ready

PROBE_PERIOD_SECONDS = 10


def startup_probe_command(
    config: WorkloadSections, secrets_dir: str, scripts_dir: str
) -> list[str]:
    """The VM's readiness checks, once, in the server container (scripts/remote/wait_ready.py
    `probe`): /health, /v1/models with the key read from its mounted file (the path is in argv,
    never the key), the chat, and the tool call when the server has a tool-call parser."""
    command = [
        "python3",
        f"{scripts_dir}/wait_ready.py",
        "probe",
        "--port",
        str(config.vllm.port),
        "--model",
        config.model.id,
        "--api-key-file",
        f"{secrets_dir}/{remote_scripts.API_KEY_FILE}",
        "--answer-timeout",
        str(remote_scripts.READINESS_ANSWER_SECONDS),
    ]
    return [*command, "--tool-call"] if config.vllm.tool_call_parser else command


def startup_probe_timeout_seconds(config: WorkloadSections) -> int:
    """One probe's bound: /health and /v1/models, then each question's answer, and a margin
    for Python's start. The kubelet fails an exec probe that outlasts it."""
    questions = 2 if config.vllm.tool_call_parser else 1
    http = wait_ready.PROBE_HTTP_SECONDS
    return int(2 * http + questions * remote_scripts.READINESS_ANSWER_SECONDS + 10)


def probes(config: WorkloadSections, secrets_dir: str, scripts_dir: str) -> dict[str, Any]:
    """The startup probe asks the model; readiness and liveness watch /health.

    A pod is Ready only once its startup probe has passed (the kubelet runs no readiness probe
    before), so a replica takes traffic, and a rolling update removes an old one, only after
    the model answered. The kubelet restarts the container after `failureThreshold`
    consecutive failed probes (kubernetes `pkg/kubelet/prober/worker.go`): while the server
    loads, each fails at once (nothing listens; the server answers nothing before it is up,
    DESIGN.md), so that is `vllm.readinessTimeout` from container start. It counts probes, not
    seconds: a server whose model hangs fails each probe only at its answer bounds, so such a
    container is restarted later, up to `failureThreshold x timeoutSeconds`; it is never
    Ready meanwhile, and the readiness Job's deadline bounds `pulumi up` (docs/gke.md)."""
    health = {"path": "/health", "port": config.vllm.port, "scheme": "HTTP"}
    timeout = config.vllm.readiness_timeout_seconds
    startup_failures = max(1, math.ceil(timeout / PROBE_PERIOD_SECONDS))
    return {
        "startupProbe": {
            "exec": {"command": startup_probe_command(config, secrets_dir, scripts_dir)},
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": startup_probe_timeout_seconds(config),
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {
            "httpGet": health,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # /health turns 503 once the engine died: restart the container after two minutes of it.
        "livenessProbe": {
            "httpGet": health,
            "periodSeconds": 20,
            "timeoutSeconds": 10,
            "failureThreshold": 6,
        },
    }
