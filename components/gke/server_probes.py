"""The server container's probes: the startup probe asks the model, the others watch /health.

A pod is Ready only once its startup probe has passed, so a replica takes traffic, and a rolling
update removes an old one, only after the model answered (docs/gke.md "Readiness").
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
    """The VM's readiness checks, once; the key file's path is in argv, never the key."""
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
    """Both HTTP checks, each answer, and a margin for Python's start."""
    questions = 2 if config.vllm.tool_call_parser else 1
    http = wait_ready.PROBE_HTTP_SECONDS
    return int(2 * http + questions * remote_scripts.READINESS_ANSWER_SECONDS + 10)


def probes(config: WorkloadSections, secrets_dir: str, scripts_dir: str) -> dict[str, Any]:
    """The startup probe's failures count probes, not seconds: while the server loads each
    fails at once, so the container restarts `vllm.readinessTimeout` after its start."""
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
        # /health turns 503 once the engine died: restart after two minutes of it.
        "livenessProbe": {
            "httpGet": health,
            "periodSeconds": 20,
            "timeoutSeconds": 10,
            "failureThreshold": 6,
        },
    }
