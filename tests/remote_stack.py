"""The exact command texts the program hands to `remote.Command`, taken from a mocked run.

Tests over real SSH run these texts, not a re-rendering, so what they prove holds for what
`pulumi up` would send. Outputs that only exist after a command ran (the container id that
`vllm-start` prints, the API key version's name) are fed back through the mocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi.runtime import mocks

from tests.mock_outputs import cloud_outputs
from tests.pulumi_program import run_program

START = "vllm-start"
READY = "vllm-ready"
FETCH = "secrets-fetch"


def commands(
    stack: str,
    changes: Mapping[str, Any] | None = None,
    *,
    start_stdout: str | None = None,
    api_key_version: str | None = None,
) -> dict[str, str]:
    """`{command name: create text}` for the stack, with real outputs substituted."""

    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = cloud_outputs(args)
        if args.typ == "command:remote:Command" and args.name == START and start_stdout:
            result["stdout"] = start_stdout
        if args.typ == "gcp:secretmanager/secretVersion:SecretVersion" and api_key_version:
            result["name"] = api_key_version
        return result

    run = run_program(stack, changes, outputs_for=outputs)
    return {r.name: str(r.inputs["create"]) for r in run.of_type("command:remote:Command")}
