"""The readiness command: phase patterns that match real log lines, and a heartbeat.

Each phase pattern in `scripts/remote/wait_ready.py` is tried against a line in the format the
named source file prints (vLLM, tpu-inference, uvicorn); where a recorded line from a public log
exists it is used verbatim. The heartbeat runs over the real-SSH harness with a replayed log
that is silent for 600 s of fixture time (tests/ssh/test_vllm_server.py).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from components.vm.node_scripts import READINESS_HEARTBEAT_SECONDS
from tests.support.pulumi_program import ROOT, run_program
from tests.support.remote_stack import commands

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "vllm_logs"


def _load_wait_ready() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "wait_ready", ROOT / "scripts" / "remote" / "wait_ready.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WAIT_READY = _load_wait_ready()
PATTERNS = dict(WAIT_READY.PHASES)

# (phase, source file that prints it, a line as it prints it). Lines marked "recorded" are
# copied from public vLLM logs; the others are the source's format string filled in.
REAL_LINES = [
    (
        "weights downloaded",
        "vllm/model_executor/model_loader/weight_utils.py",
        # recorded (vLLM 0.8, deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B)
        "INFO 03-22 12:23:49 [weight_utils.py:273] Time spent downloading weights for "
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B: 508.576789 seconds",
    ),
    (
        "weights downloaded",
        "vllm/model_executor/model_loader/default_loader.py",
        # recorded (a 2026 vLLM, RedHatAI/Qwen3-0.6B-quantized.w4a16)
        "(EngineCore pid=1026) INFO 04-24 12:14:44 [default_loader.py:384] Loading weights "
        "took 0.08 seconds",
    ),
    (
        "weights downloaded",
        "tpu_inference/runner/tpu_runner.py",
        # logger.info(f"Init model | hbm={common_utils.hbm_usage_gb(self.devices)}GiB")
        "(EngineCore pid=277) INFO 08-09 16:20:42 [tpu_runner.py:1264] Init model | "
        "hbm=[(8.97, 15.75)]GiB",
    ),
    (
        "Memory statistics (HBM budget)",
        "tpu_inference/worker/tpu_worker.py",
        # f"Memory statistics | {total_hbm_limit_gb=}GiB | {total_hbm_limit_cap_gb=}GiB | ..."
        "(EngineCore pid=277) INFO 08-09 16:21:02 [tpu_worker.py:557] Memory statistics | "
        "total_hbm_limit_gb=15.75GiB | total_hbm_limit_cap_gb=14.49GiB | "
        "total_hbm_used_gb=8.97GiB | total_hbm_avail_gb=5.52GiB",
    ),
    (
        "KV cache initialised",
        "vllm/v1/core/kv_cache_utils.py",
        # logger.info_once("GPU KV cache size: %s tokens", f"{num_tokens:,}")
        "(EngineCore pid=277) INFO 08-09 16:21:03 [kv_cache_utils.py:1287] GPU KV cache size: "
        "160,688 tokens",
    ),
    (
        "KV cache initialised",
        "tpu_inference/runner/kv_cache_manager.py",
        # logger.info(" | ".join(["Init kv-cache", f"num_total_layers=...", ...]))
        "(EngineCore pid=277) INFO 08-09 16:21:04 [kv_cache_manager.py:986] Init kv-cache | "
        "num_total_layers=35 | num_blocks=[10043] | hbm=[(14.43, 15.75)]Gb",
    ),
    (
        "compiling (the long part: XLA)",
        "tpu_inference/runner/compilation_manager.py",
        # logger.info("Precompile all the subgraphs with possible input shapes.")
        "(EngineCore pid=277) INFO 08-09 16:21:04 [compilation_manager.py:236] Precompile all "
        "the subgraphs with possible input shapes.",
    ),
    (
        "compiling (the long part: XLA)",
        "tpu_inference/runner/compilation_manager.py",
        # logger.info("Compilation of %s finished in %.2f [secs].", name, elapsed)
        "(EngineCore pid=277) INFO 08-09 16:21:23 [compilation_manager.py:188] Compilation of "
        "backbone --> {'num_tokens': 16} finished in 18.24 [secs].",
    ),
    (
        "server starting",
        "uvicorn/server.py",
        "(APIServer pid=1) INFO:     Started server process [1]",
    ),
    (
        "server starting",
        "uvicorn/lifespan/on.py",
        "(APIServer pid=1) INFO:     Waiting for application startup.",
    ),
]

# The message formats of those sources: every fixture line a phase pattern matches must be one
# of them, so the replayed logs cannot drift into lines nothing really prints.
REAL_FORMATS = [
    r"\[weight_utils\.py:\d+\] Time spent downloading weights for \S+: \d+\.\d{6} seconds$",
    r"\[default_loader\.py:\d+\] Loading weights took \d+\.\d{2} seconds$",
    r"\[tpu_runner\.py:\d+\] Init model \| hbm=\[.*\]GiB$",
    r"\[tpu_worker\.py:\d+\] Memory statistics \| total_hbm_limit_gb=[\d.]+GiB \| "
    r"total_hbm_limit_cap_gb=[\d.]+GiB \| total_hbm_used_gb=[\d.]+GiB \| "
    r"total_hbm_avail_gb=[\d.]+GiB$",
    r"\[kv_cache_utils\.py:\d+\] GPU KV cache size: [\d,]+ tokens$",
    r"\[kv_cache_manager\.py:\d+\] Init kv-cache \| num_total_layers=\d+ \| "
    r"num_blocks=\[[\d, ]+\]( \| .*)? \| hbm=\[.*\]Gb$",
    r"\[compilation_manager\.py:\d+\] Precompile all the subgraphs with possible input shapes\.$",
    r"\[compilation_manager\.py:\d+\] Precompile \w+ --> \{.*\}$",
    r"\[compilation_manager\.py:\d+\] Compilation of \w+ --> \{.*\} finished in \d+\.\d{2} "
    r"\[secs\]\.$",
    r"INFO:     Started server process \[\d+\]$",
    r"INFO:     Waiting for application startup\.$",
]


@pytest.mark.parametrize(("phase", "source", "line"), REAL_LINES)
def test_each_phase_pattern_matches_a_real_line(phase: str, source: str, line: str) -> None:
    assert PATTERNS[phase].search(line), f"{phase!r} misses what {source} prints"
    others = [p for name, p in PATTERNS.items() if name != phase and p.search(line)]
    assert not others, f"{line!r} also matches another phase"


def test_every_phase_has_a_real_line_and_names_its_source() -> None:
    assert {phase for phase, _, _ in REAL_LINES} == set(PATTERNS)
    text = (ROOT / "scripts" / "remote" / "wait_ready.py").read_text()
    for _, source, _ in REAL_LINES:
        assert source in text, f"wait_ready.py does not name {source} next to its pattern"
    assert "uvicorn/lifespan/on.py" in text  # READY's source


def test_patterns_reject_lines_vllm_prints_only_on_gpus() -> None:
    gpu_only = (
        # vllm/v1/worker/gpu_model_runner.py: not printed by tpu-inference
        "(EngineCore pid=1026) INFO 04-24 12:14:45 [gpu_model_runner.py:4820] Model loading "
        "took 0.53 GiB memory and 6.1 seconds"
    )
    assert not any(p.search(gpu_only) for p in PATTERNS.values())


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_fixture_phase_lines_are_real_lines(fixture: str) -> None:
    for raw in (FIXTURES / fixture).read_text().splitlines():
        if not raw or raw.startswith("#"):
            continue
        text = raw.split("\t", 2)[2]
        if any(p.search(text) for p in PATTERNS.values()):
            assert any(re.search(f, text) for f in REAL_FORMATS), f"{fixture}: {text}"


def test_the_default_heartbeat_is_at_most_30_seconds() -> None:
    assert READINESS_HEARTBEAT_SECONDS <= 30
    assert WAIT_READY.HEARTBEAT_SECONDS <= 30
    ready = commands("v5e1")["vllm-ready"]
    assert f"--heartbeat {READINESS_HEARTBEAT_SECONDS}" in ready


def test_every_remote_command_keeps_previous_output_out_of_its_environment() -> None:
    """pulumi-command would otherwise Setenv PULUMI_COMMAND_STDOUT/STDERR on each re-run, and
    sshd without AcceptEnv refuses it with a warning (remote/commandOutputs.go)."""
    run = run_program("v5e1")
    remote = run.of_type("command:remote:Command")
    assert {c.name for c in remote} == {
        "secrets-fetch",
        "vllm-start",
        "vllm-ready",
        "vllm-metrics-agent",
    }
    for command in remote:
        assert command.inputs.get("addPreviousOutputInEnv") is False, command.name
