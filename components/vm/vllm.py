"""VllmServer: `docker run` the server on the node, then wait until it really serves.

Changing a flag or the image changes only the start script, so Pulumi re-runs it and the TPU is
untouched. No command has a delete step: once the node is gone (flex-start expiry) there is
nothing to stop, and `pulumi destroy` must not wait on an unreachable host.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command

from components.compile_cache import NO_CACHE, CompileCache, cache_result
from components.config import ServerSettings
from components.vm import metrics_agent, node_scripts
from components.vm.node_command import node_command

CONTAINER = "tpu-vllm"
READY_MARKER = "TPU_VLLM_READY "


def parse_ready(stdout: str | None) -> dict[str, Any]:
    """The readiness script's result line (scripts/remote/wait_ready.py)."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(READY_MARKER):
            result = dict(json.loads(line[len(READY_MARKER) :]))
            result["cache"] = cache_result(result.get("cache"))
            return result
    return {
        "startup_seconds": None,
        "first_answer_seconds": None,
        "hbm": None,
        "cache": dict(NO_CACHE),
    }


def _warn_if_agent_failed(stdout: str | None, urn: str) -> None:
    """What is left after the script's own retries needs the operator: a plain `pulumi up`
    re-runs nothing (inputs unchanged), so the fix replaces the command by its URN."""
    outcome = metrics_agent.parse_result(stdout)
    if outcome.startswith("failed"):
        pulumi.log.warn(
            f"tpu-vllm:monitoring.enabled: the node's metrics agent {outcome}; the server "
            "serves, but its metrics do not reach Cloud Monitoring (the log does). Fix: see "
            'docs/operations.md "Watch it serve", then run the agent\'s setup again with '
            f"`pulumi up --replace '{urn}'` (a plain `pulumi up` does not re-run it)."
        )


@dataclass(frozen=True, kw_only=True)
class VllmServerArgs:
    #: What the node's scripts are rendered from (`StackConfig.server_settings()`).
    settings: ServerSettings
    connection: command.remote.ConnectionArgs
    #: `NAME@sha256:...`, the pinned image the container runs (components/image_pin.py).
    image: pulumi.Input[str]
    #: Commands that must finish first (the secret fetch); a change in them restarts the server.
    after: Sequence[command.remote.Command] = field(default_factory=list)
    #: The compile-cache bucket and grant; the start waits for the grant so its restore works.
    cache: CompileCache | None = None
    #: The node's metric and log writer grants (`monitoring.enabled`): the log driver needs them
    #: when the container starts, the metrics agent after.
    telemetry_grants: Sequence[pulumi.Resource] = field(default_factory=list)


class VllmServer(pulumi.ComponentResource):
    """The vLLM container on the node, and proof that it serves."""

    startup_seconds: pulumi.Output[float | None]
    first_answer_seconds: pulumi.Output[float | None]
    hbm: pulumi.Output[dict[str, float] | None]
    cache_restored: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:VllmServer", name, None, opts)
        config = args.settings
        self.start = node_command(
            f"{name}-start",
            args.connection,
            pulumi.Output.from_input(args.image).apply(
                lambda image: node_scripts.start_server_script(config.serving(image), CONTAINER)
            ),
            # New secrets (a rotated API key) need a new container to take effect.
            triggers=[c.create for c in args.after],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    *args.after,
                    *([args.cache.writer] if args.cache else []),
                    *args.telemetry_grants,
                ],
            ),
        )
        self.ready = node_command(
            f"{name}-ready",
            args.connection,
            self.start.stdout.apply(
                lambda stdout: node_scripts.readiness_script(config, stdout, CONTAINER)
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[self.start]),
        )
        self.metrics_agent: command.remote.Command | None = None
        if config.monitoring.enabled:
            # After readiness, so the agent's install never slows the server's start.
            self.metrics_agent = node_command(
                f"{name}-metrics-agent",
                args.connection,
                metrics_agent.metrics_agent_script(config),
                pulumi.ResourceOptions(parent=self, depends_on=[self.ready]),
            )
            pulumi.Output.all(self.metrics_agent.stdout, self.metrics_agent.urn).apply(
                lambda parts: _warn_if_agent_failed(parts[0], parts[1])
            )
        result = self.ready.stdout.apply(parse_ready)
        self.startup_seconds = result.apply(lambda r: r.get("startup_seconds"))
        self.first_answer_seconds = result.apply(lambda r: r.get("first_answer_seconds"))
        self.hbm = result.apply(lambda r: r.get("hbm"))
        # Whether this start was warm, and from which generation (never None: an output).
        self.cache_restored = result.apply(lambda r: cache_result(r.get("cache")))
        self.register_outputs(
            {
                "startup_seconds": self.startup_seconds,
                "first_answer_seconds": self.first_answer_seconds,
                "hbm": self.hbm,
                "cache_restored": self.cache_restored,
            }
        )
