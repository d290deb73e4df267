"""The mocked program runner, with the tests' defaults: a placeholder project, cloud outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.config import ConfigError
from scripts import program_runner
from scripts.program_runner import (
    ROOT,
    Call,
    InvokeFailure,
    NewResource,
    ProgramRun,
    Registered,
    stack_file_config,
    with_changes,
)
from tests.support.mock_outputs import MANAGED_ZONES, cloud_outputs

__all__ = [
    "ROOT",
    "TEST_PROJECT",
    "InvokeFailure",
    "ProgramRun",
    "Registered",
    "refused",
    "rejection",
    "run_program",
    "stack_file_config",
    "with_changes",
]

TEST_PROJECT = "test-project"


def run_program(
    stack: str,
    changes: Mapping[str, Any] | None = None,
    *,
    project: str | None = TEST_PROJECT,
    preview: bool = False,
    outputs_for: NewResource | None = cloud_outputs,
    call: Call | None = None,
    expect_error: bool = False,
    managed_zones: Mapping[str, str] | None = None,
) -> ProgramRun:
    """`program_runner.run_program` with what a real `pulumi up` would answer, mocked.

    The Cloud DNS zones that exist are `managed_zones`; by default `MANAGED_ZONES`, unless the
    test brings its own `call`, which then answers every invoke itself.
    """
    if managed_zones is None and call is None:
        managed_zones = MANAGED_ZONES
    return program_runner.run_program(
        stack,
        changes,
        project=project,
        preview=preview,
        outputs_for=outputs_for,
        call=call,
        expect_error=expect_error,
        managed_zones=managed_zones,
    )


def rejection(stack: str, changes: Mapping[str, Any]) -> ConfigError:
    """The error of a config the program refuses, after checking it created nothing."""
    run = run_program(stack, changes, expect_error=True)
    assert isinstance(run.error, ConfigError), run.error
    assert run.resources == []
    assert run.outputs == {}
    return run.error


def refused(stack: str, changes: Mapping[str, Any], key: str, texts: list[str]) -> ConfigError:
    """A `rejection` whose message names the key, carries each text and says how to fix it."""
    error = rejection(stack, changes)
    message = str(error)
    assert key in message
    for text in texts:
        assert text in message
    assert "Fix" in message or "did you mean" in message or "set it to" in message
    return error
