"""A committed stack file's `StackConfig`, as the program's own loader parses it, for the tests
that hand a component, a provider or a script its config without running the program.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.config import StackConfig
from scripts.program_runner import stack_file_config, with_changes
from tests.support.output_contract import config_of


def config_for(stack: str, changes: Mapping[str, Any] | None = None) -> StackConfig:
    """`Pulumi.<stack>.yaml`'s config with `changes` (`{"tpu-vllm:vllm.port": 8080}` paths,
    `program_runner.with_changes`: a None deletes the key)."""
    return config_of(with_changes(stack_file_config(stack), changes or {}), stack=stack)


def stack_config(stack: str, **tpu_changes: Any) -> StackConfig:
    """`Pulumi.<stack>.yaml`'s config with `tpu_changes` merged into its `tpu` section (a None
    stays, as a key set to null)."""
    raw = stack_file_config(stack)
    raw["tpu-vllm:tpu"] = {**raw["tpu-vllm:tpu"], **tpu_changes}
    return config_of(raw, stack=stack)
