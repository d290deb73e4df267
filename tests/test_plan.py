"""The credential-free plan: deterministic, secrets masked, one change shows as one change."""

from __future__ import annotations

import difflib
import os
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
    assert [line.replace(" ", "") for line in changed] == [
        "---max-model-len32768\\",
        "+--max-model-len16384\\",
    ]


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


def test_plan_covers_the_gke_stack() -> None:
    done = run_plan_script("v6e4-gke")
    assert done.returncode == 0, done.stderr
    assert "gke-tpu-pool  (gcp:container/nodePool:NodePool)" in done.stdout
    assert "vllm-deployment  (kubernetes:apps/v1:Deployment)" in done.stdout
    assert "flexStart: true" in done.stdout
    assert 'loadBalancerIP: "<gke-address.address>"' in done.stdout
    assert 'endpoint: "http://<gke-address.address>:8000"' in done.stdout
    assert "replicas: 2" in done.stdout
