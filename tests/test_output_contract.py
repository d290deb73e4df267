"""The stack outputs are a contract with other services: names, types and secrecy."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.pulumi_program import run_program

NUMBER = (int, float)
# name -> (accepted types, may be None, must be secret)
CONTRACT: dict[str, tuple[tuple[type, ...], bool, bool]] = {
    "endpoint": ((str,), False, False),
    "endpoint_ip": ((str,), False, False),
    "openai_base_url": ((str,), False, False),
    "model": ((str,), False, False),
    "api_key": ((str,), False, True),
    "api_key_secret": ((str,), False, False),
    "zone": ((str,), False, False),
    "chip": ((str,), False, False),
    "queued_resource": ((str,), False, False),
    "node": ((str,), False, False),
    "external_ip": ((str,), True, False),
    "internal_ip": ((str,), True, False),
    "expires_at": ((str,), True, False),
    "renew_command": ((str,), False, False),
    "ssh_command": ((str,), False, False),
    "ssh_private_key": ((str,), False, True),
    "ssh_host_key": ((str,), True, False),
    "hourly_cost_usd": (NUMBER, False, False),
    "max_run_cost_usd": (NUMBER, True, False),
    "hbm": ((dict,), True, False),
    "startup_seconds": (NUMBER, True, False),
    "zones": ((list,), False, False),
    "vllm_args": ((list,), False, False),
    # "" when tpu-vllm:cache.enabled is false.
    "compile_cache": ((str,), False, False),
    # {"restored": false, "generation": "", ...} when off or not known.
    "cache_restored": ((dict,), False, False),
}


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_every_contract_output_is_present_typed_and_secret_where_it_must_be(stack: str) -> None:
    run = run_program(stack)
    assert set(run.outputs) == set(CONTRACT), "outputs changed: update the README and consumers"
    for name, (types, nullable, secret) in CONTRACT.items():
        value: Any = run.outputs[name]
        assert (value is None and nullable) or isinstance(value, types), (name, value)
        assert (name in run.secret_outputs) == secret, name
    assert re.fullmatch(r"http://[0-9.]+:8000", run.outputs["endpoint"])
    assert run.outputs["openai_base_url"] == run.outputs["endpoint"] + "/v1"
    assert set(run.outputs["hbm"]) == {"total_gib", "usable_gib", "used_gib", "available_gib"}
    assert run.outputs["api_key_secret"].startswith("projects/")
    assert re.fullmatch(r"gs://[a-z0-9-]+/xla-cache/[0-9a-f]{16}/", run.outputs["compile_cache"])
    restored = run.outputs["cache_restored"]
    assert set(restored) == {"restored", "files", "bytes", "seconds", "generation", "reason"}
    assert restored["generation"].startswith(run.outputs["compile_cache"])


def test_consumers_read_only_contract_outputs() -> None:
    """Whatever the consumer example reads must be in the contract."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    read: set[str] = set()
    for path in (root / "examples").rglob("*.py"):
        for name in re.findall(r"require_output\(\s*[\"'](\w+)[\"']", path.read_text()):
            assert name in CONTRACT, f"{path} reads {name}, which is not a stack output"
            read.add(name)
    assert {"openai_base_url", "model", "api_key"} <= read  # the example really reads them


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_program_runs_under_mocks_that_only_echo_inputs(stack: str, preview: bool) -> None:
    """Mocks that know no cloud outputs (or a preview, where they are unknown) must not crash
    the program: every value computed from an output tolerates its absence."""
    run = run_program(stack, preview=preview, outputs_for=None)
    assert len(run.resources) == 24  # 21, plus the compile cache's component, bucket, grant
    assert set(run.outputs) == set(CONTRACT)
    assert run.outputs["model"] in ("google/gemma-4-E2B-it", "google/gemma-4-31B-it")
