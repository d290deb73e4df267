"""The credential-free plan: deterministic, secrets masked, one change shows as one change."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from typing import Any

from pulumi.runtime import mocks

from scripts.plan import after_apply, plan
from tests.pulumi_program import ROOT

SENTINEL = "PLANSECRETSENTINEL0123456789abcdefghijklmnop"


def run_plan_script(stack: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "PULUMI_"))}
    return subprocess.run(
        [sys.executable, "scripts/plan.py", stack],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_plan_is_byte_identical_across_runs_in_fresh_processes() -> None:
    first, second = run_plan_script("v6e4"), run_plan_script("v6e4")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "tpu-qr  (pulumi-python:dynamic:Resource)" in first.stdout
    assert "  --tensor-parallel-size 4 \\" in first.stdout  # scripts one flag per line


def test_plan_masks_secrets() -> None:
    def outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
        result = after_apply(args)
        if args.typ == "random:index/randomPassword:RandomPassword":
            result["result"] = SENTINEL
        if args.typ == "tls:index/privateKey:PrivateKey":
            result["privateKeyOpenssh"] = SENTINEL + "-ssh"
        return result

    text = plan("v5e1", outputs_for=outputs)
    assert SENTINEL not in text
    assert "api_key: [secret]" in text
    assert 'secretData: "[secret]"' in text
    assert 'connection: "[secret]"' in text


def test_one_flag_change_changes_the_plan_in_exactly_one_place() -> None:
    before = plan("v5e1").splitlines()
    after = plan("v5e1", changes={"tpu-vllm:vllm.maxModelLen": 16384}).splitlines()
    changed = [
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    # The flag, and the compile-cache key it is part of (start script and output): nothing else.
    key = re.compile(r"/xla-cache/[0-9a-f]{16}/")
    assert [key.sub("/xla-cache/KEY/", line.replace(" ", "")) for line in changed] == [
        "-cache_prefix=gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/",
        "+cache_prefix=gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/",
        "---max-model-len32768\\",
        "+--max-model-len16384\\",
        '-compile_cache:"gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/"',
        '+compile_cache:"gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/"',
    ]
    assert changed[0] != changed[1]


def test_unknown_stack_is_a_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/plan.py", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "no Pulumi.nope.yaml" in done.stderr
