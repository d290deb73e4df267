"""The credential-free plan: deterministic, secrets masked, one change shows as one change."""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import mocks

from components.config import ConfigError
from scripts.plan import PLACEHOLDER_PROJECT, after_apply, plan
from scripts.program_runner import run_program
from tests.support.plan_script import run_plan_script
from tests.support.pulumi_program import ROOT


def plan_error(stack: str, changes: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        plan(stack, changes=changes)
    return str(raised.value)


SENTINEL = "PLANSECRETSENTINEL0123456789abcdefghijklmnop"


def test_plan_is_byte_identical_across_runs_in_fresh_processes() -> None:
    first, second = run_plan_script("v6e4"), run_plan_script("v6e4")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "tpu-qr  (pulumi-python:dynamic:Resource)" in first.stdout
    assert "  --tensor-parallel-size 4 \\" in first.stdout  # scripts one flag per line


def test_plan_starts_with_a_summary_of_what_is_bought() -> None:
    text = plan("v5e1")
    head = text.split("\nresources (")[0]
    for line in (
        "  stack: v5e1 (Pulumi.v5e1.yaml)",
        "  chip: v5e-1 (v5litepod-1, runtime v2-alpha-tpuv5-lite)",
        "  zones: us-west4-a (in this order; each may queue 30m for capacity)",
        "  model: google/gemma-4-E2B-it (8.97 GiB of weights)",
        "  provisioning: flex-start, at most 4h per run",
        "  cost: $0.602/h; at most $2.41 per run (it stops billing on its own)",
        "  vllm serve google/gemma-4-E2B-it",
        "    --max-model-len 32768",
        "    --enable-prefix-caching",
        '    --limit-mm-per-prompt \'{"image":4,"audio":1}\'',
    ):
        assert line + "\n" in head, line
    # The summary comes first, before warnings and resources.
    assert text.index("summary:") < text.index("warnings:") < text.index("resources (")
    spot = plan(
        "v5e1", changes={"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    )
    assert "  provisioning: spot, no run limit\n" in spot
    assert "billed until `pulumi destroy`" in spot


def test_each_script_is_shown_once_and_referenced_by_its_hash() -> None:
    text = plan("v5e1")
    # No 3,000-character JSON lines: a trigger names the script it re-runs on.
    # (A logs command and its console link are each one value, a line of their own.)
    single = ("logs_command:", "logs_url:")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(single)]
    assert max(len(line) for line in lines) < 200
    headers = re.findall(r"create: script (\S+) \(sha256 ([0-9a-f]{12}), \d+ lines\) \|", text)
    assert [name for name, _ in headers] == [
        "secrets-fetch.create",
        "vllm-metrics-agent.create",
        "vllm-ready.create",
        "vllm-start.create",
    ]
    fetch_hash = dict(headers)["secrets-fetch.create"]
    assert f"    - [script secrets-fetch.create, sha256 {fetch_hash}]\n" in text
    assert text.count("fetch hf_token YOUR-PROJECT hf-token latest") == 1
    # The hash is the script's own: that of the exact text the program hands remote.Command.
    run = run_program(
        "v5e1", project=PLACEHOLDER_PROJECT, outputs_for=after_apply, call=lambda a: dict(a.args)
    )
    [script] = [r.inputs["create"] for r in run.resources if r.name == "secrets-fetch"]
    assert fetch_hash == hashlib.sha256(script.encode()).hexdigest()[:12]


def test_several_stacks_and_stack_file_paths() -> None:
    done = run_plan_script("Pulumi.v5e1.yaml", str(ROOT / "Pulumi.v6e4.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("# tpu-vllm plan for stack ") == 2
    assert "# tpu-vllm plan for stack v5e1\n" in done.stdout
    assert "# tpu-vllm plan for stack v6e4\n" in done.stdout
    assert done.stdout == plan("v5e1") + "\n" + plan("v6e4")


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
    # The flag in the summary and in the start script, that script's content hash, and the
    # compile-cache key the flag is part of (in the start script and the output): nothing else.
    key = re.compile(r"/xla-cache/[0-9a-f]{16}/")
    assert sorted(key.sub("/xla-cache/KEY/", line.replace(" ", "")) for line in changed) == sorted(
        [
            "---max-model-len32768",
            "+--max-model-len16384",
            "---max-model-len32768\\",
            "+--max-model-len16384\\",
            f"-create:scriptvllm-start.create(sha256{start_hash(before)},{start_lines(before)}lines)|",
            f"+create:scriptvllm-start.create(sha256{start_hash(after)},{start_lines(before)}lines)|",
            "-cache_prefix=gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/",
            "+cache_prefix=gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/",
            '-compile_cache:"gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/"',
            '+compile_cache:"gs://tpu-vllm-v5e1-xla-3c98876c/xla-cache/KEY/"',
        ]
    )
    prefixes = [line for line in changed if "cache_prefix=" in line]
    assert prefixes[0][1:] != prefixes[1][1:]  # the key really changed
    assert start_hash(before) != start_hash(after)


def start_lines(lines: list[str]) -> str:
    [found] = [
        m.group(1)
        for line in lines
        if (m := re.search(r"script vllm-start.create \(sha256 [0-9a-f]+, (\d+) lines\)", line))
    ]
    return found


def start_hash(lines: list[str]) -> str:
    [found] = [
        m.group(1)
        for line in lines
        if (m := re.search(r"script vllm-start.create \(sha256 ([0-9a-f]+),", line))
    ]
    return found


def test_unknown_stack_lists_the_stacks_that_exist() -> None:
    done = run_plan_script("v5e2")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "no stack 'v5e2': there is no Pulumi.v5e2.yaml" in done.stderr
    assert "Did you mean `v5e1`?" in done.stderr
    assert "Stacks: v5e1, v6e4, v6e4-gke." in done.stderr


def test_a_bad_config_is_the_plans_answer(tmp_path: Path) -> None:
    run = plan_error("v5e1", {"tpu-vllm:tpu.provisioning": "flex_start"})
    assert "tpu-vllm:tpu.provisioning" in run


def test_plan_covers_the_gke_stack() -> None:
    done = run_plan_script("v6e4-gke")
    assert done.returncode == 0, done.stderr
    assert "gke-tpu-pool" not in done.stdout  # TPU node pools are the ComputeClass's
    assert "vllm-compute-class  (kubernetes:cloud.google.com/v1:ComputeClass)" in done.stdout
    assert "vllm-disruption-budget  (kubernetes:policy/v1:PodDisruptionBudget)" in done.stdout
    assert "vllm-deployment  (kubernetes:apps/v1:Deployment)" in done.stdout
    assert "leadTimeSeconds: 3600" in done.stdout
    assert 'networking.gke.io/load-balancer-ip-addresses: "tpu-vllm-v6e4-gke-lb"' in done.stdout
    assert 'endpoint: "http://<gke-address.address>:8000"' in done.stdout
    assert "replicas: 2" in done.stdout
    # The summary says what is different about GKE: replicas, the cluster, and that it bills on.
    assert "  backend: gke, 2 replica(s), cluster created, us-east5\n" in done.stdout
    assert "$10.80/h (2 x $5.40)" in done.stdout
    assert "GKE replaces an ended node, so it bills until `pulumi destroy`" in done.stdout
    assert "script vllm-scripts.data.cache_restore.sh (sha256 " in done.stdout
