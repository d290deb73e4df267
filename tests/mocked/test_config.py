"""Stack config: both stack files evaluate, and every bad input stops before anything exists."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from components import catalog, ssh_dial
from components.config import ConfigError, parse_duration
from tests.support import seed_facts
from tests.support.pulumi_program import refused, run_program


def test_v5e1_stack_file_evaluates_with_seed_000_flags_exactly() -> None:
    run = run_program("v5e1")
    assert run.outputs["vllm_args"] == seed_facts.serve_flags()
    assert run.outputs["chip"] == "v5litepod-1"
    assert run.outputs["zones"] == ["us-west4-a"]
    assert run.outputs["model"] == "google/gemma-4-E2B-it"
    # Flex-start v5e: seed 000 spot $0.58 + 3.8% = $0.602/h; 4 h bounds a run at $2.41.
    spot = seed_facts.figure("spot_usd_per_hour")
    hourly = spot * (1 + seed_facts.figure("flex_start_premium_over_spot"))
    assert hourly == pytest.approx(0.602, abs=1e-3)
    assert run.outputs["hourly_cost_usd"] == pytest.approx(0.602)
    assert seed_facts.figure("max_run_duration") == "4h"
    assert run.outputs["max_run_cost_usd"] == pytest.approx(round(4 * 0.602, 2))


def test_v6e4_stack_file_evaluates_with_seed_003_flags() -> None:
    run = run_program("v6e4")
    args = run.outputs["vllm_args"]
    pairs = dict(itertools.pairwise(args))
    assert pairs["--tensor-parallel-size"] == "4"
    assert pairs["--max-model-len"] == "65536"
    assert pairs["--max-num-batched-tokens"] == "4096"
    assert pairs["--kv-cache-dtype"] == "fp8_e5m2"
    assert pairs["--limit-mm-per-prompt"] == '{"image":0,"audio":0}'
    assert pairs["--tool-call-parser"] == "gemma4"
    assert pairs["--reasoning-parser"] == "gemma4"
    assert "--enable-auto-tool-choice" in args
    assert run.outputs["chip"] == "v6e-4"
    assert run.outputs["zones"] == ["southamerica-west1-a", "us-east5-a", "europe-west4-a"]
    # seed 003: $1.35 per chip-hour flex-start, 4 chips.
    assert run.outputs["hourly_cost_usd"] == pytest.approx(5.40)
    assert run.outputs["max_run_cost_usd"] == pytest.approx(21.60)


ALL_BOOT_KILLERS = [*sorted(catalog.KV_CACHE_DTYPES_KILLING_BOOT), "turboquant_4bit"]

# (case id, stack, changes, key the error must name, further text it must contain)
BAD_INPUTS: list[tuple[str, str, dict[str, Any], str, list[str]]] = [
    (
        "unknown chip",
        "v5e1",
        {"tpu-vllm:tpu.chip": "v7-1"},
        "tpu-vllm:tpu.chip",
        ["'v7-1'", "v5e-1"],
    ),
    (
        "unknown provisioning",
        "v5e1",
        {"tpu-vllm:tpu.provisioning": "preemptible"},
        "tpu-vllm:tpu.provisioning",
        ["'preemptible'", "flex-start | spot | on-demand"],
    ),
    (
        "flex-start without run limit",
        "v5e1",
        {"tpu-vllm:tpu.maxRunDuration": None},
        "tpu-vllm:tpu.maxRunDuration",
        ["required for flex-start"],
    ),
    (
        "run limit over 7 days",
        "v6e4",
        {"tpu-vllm:tpu.maxRunDuration": "8d"},
        "tpu-vllm:tpu.maxRunDuration",
        ["'8d'", "7 days"],
    ),
    (
        "duration that does not parse",
        "v5e1",
        {"tpu-vllm:tpu.maxRunDuration": "4 hours"},
        "tpu-vllm:tpu.maxRunDuration",
        ["'4 hours'", "4h"],
    ),
    (
        "readiness timeout that does not parse",
        "v5e1",
        {"tpu-vllm:vllm.readinessTimeout": "soon"},
        "tpu-vllm:vllm.readinessTimeout",
        ["'soon'"],
    ),
    (
        "31B does not fit v5e-1 HBM",
        "v5e1",
        {"tpu-vllm:model.id": "google/gemma-4-31B-it"},
        "tpu-vllm:tpu.chip",
        [
            "HBM",
            "58.25 GiB of weights vs 14.49 GiB usable",
            "1 chip(s) x 15.75 GiB HBM x gpuMemoryUtilization 0.92 = 14.49 GiB",
        ],
    ),
    (
        "tensor parallel not the chip count",
        "v5e1",
        {"tpu-vllm:vllm.tensorParallelSize": 4},
        "tpu-vllm:vllm.tensorParallelSize",
        ["4", "set it to 1"],
    ),
    (
        "tensor parallel 1 on v6e-4",
        "v6e4",
        {"tpu-vllm:vllm.tensorParallelSize": 1},
        "tpu-vllm:vllm.tensorParallelSize",
        ["set it to 4"],
    ),
    (
        "v5litepod-1 flex-start only in rejecting zones",
        "v5e1",
        {"tpu-vllm:tpu.zones": ["europe-west4-a", "europe-west4-b"]},
        "tpu-vllm:tpu.zones",
        [
            'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1"',
            "us-west4-a",
        ],
    ),
    ("empty zones", "v6e4", {"tpu-vllm:tpu.zones": []}, "tpu-vllm:tpu.zones", ["at least one"]),
    (
        "malformed zone",
        "v6e4",
        {"tpu-vllm:tpu.zones": ["us-west4"]},
        "tpu-vllm:tpu.zones",
        ["us-west4 is not a zone"],
    ),
    (
        "allowedCidrs missing",
        "v5e1",
        {"tpu-vllm:access.allowedCidrs": None},
        "tpu-vllm:access.allowedCidrs",
        ["required"],
    ),
    (
        "allowedCidrs malformed",
        "v5e1",
        {"tpu-vllm:access.allowedCidrs": ["10.0.0.0/33"]},
        "tpu-vllm:access.allowedCidrs",
        ["'10.0.0.0/33' is not a CIDR range"],
    ),
    (
        "allowedCidrs host bits set",
        "v5e1",
        {"tpu-vllm:access.allowedCidrs": ["10.1.2.3/8"]},
        "tpu-vllm:access.allowedCidrs",
        ["host bits"],
    ),
    (
        "public without allowPublic",
        "v5e1",
        {"tpu-vllm:access.allowedCidrs": ["0.0.0.0/0"]},
        "tpu-vllm:access.allowedCidrs",
        ["0.0.0.0/0", "allowPublic"],
    ),
    (
        "public ssh without allowPublic",
        "v5e1",
        {"tpu-vllm:access.sshCidrs": ["0.0.0.0/0"]},
        "tpu-vllm:access.sshCidrs",
        ["allowPublic"],
    ),
    (
        "maxModelLen zero",
        "v5e1",
        {"tpu-vllm:vllm.maxModelLen": 0},
        "tpu-vllm:vllm.maxModelLen",
        ["= 0", "positive"],
    ),
    (
        "maxModelLen negative",
        "v6e4",
        {"tpu-vllm:vllm.maxModelLen": -5},
        "tpu-vllm:vllm.maxModelLen",
        ["-5"],
    ),
    # vLLM declares max_num_batched_tokens `ge=1` (vllm/config/scheduler.py): a value the
    # program let through would only fail at boot, on a billing TPU.
    *[
        (
            f"maxNumBatchedTokens {value!r} on {stack}",
            stack,
            {"tpu-vllm:vllm.maxNumBatchedTokens": value},
            f"tpu-vllm:vllm.maxNumBatchedTokens = {shown}",
            ["must be positive", "Fix: a token count"],
        )
        for stack, value, shown in [
            ("v5e1", 0, "0"),
            ("v6e4", -4096, "-4096"),
            ("v6e4-gke", 0, "0"),
            ("v5e1", "0", "0"),
        ]
    ],
    (
        "tensor parallel zero",
        "v6e4",
        {"tpu-vllm:vllm.tensorParallelSize": 0},
        "tpu-vllm:vllm.tensorParallelSize = 0",
        ["must be positive", "set it to 4"],
    ),
    *[
        (
            f"extraArgs {args!r}",
            "v5e1",
            {"tpu-vllm:vllm.extraArgs": args},
            "tpu-vllm:vllm.extraArgs",
            [texts, "vLLM refuses to boot", "Fix: a whole number of at least 1"],
        )
        for args, texts in [
            (["--max-num-seqs", "0"], "--max-num-seqs takes a positive integer (here '0')"),
            (["--max-num-seqs=-8"], "--max-num-seqs takes a positive integer (here '-8')"),
            (["--stream-interval", "x"], "--stream-interval takes a positive integer (here 'x')"),
            (["--max-num-seqs"], "(here nothing follows it)"),
        ]
    ],
    (
        "gpuMemoryUtilization zero",
        "v5e1",
        {"tpu-vllm:vllm.gpuMemoryUtilization": 0},
        "tpu-vllm:vllm.gpuMemoryUtilization",
        ["(0, 1]"],
    ),
    (
        "gpuMemoryUtilization above one",
        "v5e1",
        {"tpu-vllm:vllm.gpuMemoryUtilization": 1.2},
        "tpu-vllm:vllm.gpuMemoryUtilization",
        ["1.2", "(0, 1]"],
    ),
    (
        "unknown kvCacheDtype",
        "v5e1",
        {"tpu-vllm:vllm.kvCacheDtype": "int4"},
        "tpu-vllm:vllm.kvCacheDtype",
        ["'int4'", "unknown"],
    ),
    (
        "kvCacheDtype the CLI rejects",
        "v5e1",
        {"tpu-vllm:vllm.kvCacheDtype": "int8"},
        "tpu-vllm:vllm.kvCacheDtype",
        ["rejected by vLLM's CLI"],
    ),
    *[
        (
            f"kvCacheDtype {dtype} kills the server at boot",
            "v5e1",
            {"tpu-vllm:vllm.kvCacheDtype": dtype},
            "tpu-vllm:vllm.kvCacheDtype",
            [repr(dtype), "dies at boot"],
        )
        for dtype in ALL_BOOT_KILLERS
    ],
    (
        "unknown model without weightsGiB",
        "v5e1",
        {"tpu-vllm:model.id": "acme/mystery-7b"},
        "tpu-vllm:model.id",
        ["'acme/mystery-7b'", "weightsGiB"],
    ),
    (
        "key typo",
        "v5e1",
        {"tpu-vllm:vllm.maxModelLength": 1024},
        "tpu-vllm:vllm.maxModelLength",
        ["did you mean `maxModelLen`"],
    ),
    (
        "secret on the command line",
        "v5e1",
        {"tpu-vllm:vllm.extraArgs": ["--api-key", "x"]},
        "tpu-vllm:vllm.extraArgs",
        ["--api-key", "secret"],
    ),
    (
        "flag that has its own key",
        "v5e1",
        {"tpu-vllm:vllm.extraArgs": ["--max-model-len=8192"]},
        "tpu-vllm:vllm.extraArgs",
        ["tpu-vllm:vllm.maxModelLen"],
    ),
    ("privileged port", "v5e1", {"tpu-vllm:vllm.port": 80}, "tpu-vllm:vllm.port", ["80"]),
    ("section not an object", "v5e1", {"tpu-vllm:tpu": "v5e-1"}, "tpu-vllm:tpu", ["not an object"]),
    (
        "provisioning misspelt",
        "v5e1",
        {"tpu-vllm:tpu.provisioning": "flex_start"},
        "tpu-vllm:tpu.provisioning = 'flex_start'",
        ["did you mean `flex-start`?", "Valid: flex-start | spot | on-demand"],
    ),
    (
        "chip misspelt",
        "v5e1",
        {"tpu-vllm:tpu.chip": "v5e1"},
        "tpu-vllm:tpu.chip = 'v5e1'",
        ["did you mean `v5e-1`?"],
    ),
    (
        "dtype misspelt",
        "v5e1",
        {"tpu-vllm:vllm.dtype": "bf16"},
        "tpu-vllm:vllm.dtype = 'bf16'",
        ["did you mean `bfloat16`?"],
    ),
    (
        "kv-cache dtype misspelt",
        "v6e4",
        {"tpu-vllm:vllm.kvCacheDtype": "fp8-e5m2"},
        "tpu-vllm:vllm.kvCacheDtype = 'fp8-e5m2'",
        ["did you mean `fp8_e5m2`?"],
    ),
    (
        "missing chip",
        "v5e1",
        {"tpu-vllm:tpu.chip": None},
        "tpu-vllm:tpu.chip is not set",
        ["required"],
    ),
    (
        "empty key",
        "v5e1",
        {"tpu-vllm:vllm": {"port": None, "maxModelLen": "lots"}},
        "tpu-vllm:vllm.maxModelLen = 'lots'",
        ["a token count"],
    ),
]


@pytest.mark.parametrize(
    ("stack", "changes", "key", "texts"),
    [pytest.param(s, c, k, t, id=i) for i, s, c, k, t in BAD_INPUTS],
)
def test_bad_input_is_rejected_before_any_resource(
    stack: str, changes: dict[str, Any], key: str, texts: list[str]
) -> None:
    assert_message_convention(refused(stack, changes, key, texts))


def assert_message_convention(error: ConfigError) -> None:
    """components/messages.py: every problem is one line ending with a period, and Python's
    `None` never shows (an absent value "is not set"; JSON's `null` where a file said so)."""
    for problem in error.problems:
        assert "\n" not in problem
        assert problem.endswith("."), problem
        assert "None" not in problem, problem


def test_a_misspelt_provisioning_with_a_run_limit_names_no_python_none() -> None:
    run = run_program(
        "v5e1",
        {"tpu-vllm:tpu.provisioning": "Flex-Start", "tpu-vllm:tpu.maxRunDuration": "4h"},
        expect_error=True,
    )
    assert isinstance(run.error, ConfigError)
    assert_message_convention(run.error)
    [problem] = run.error.problems
    assert "did you mean `flex-start`?" in problem


@pytest.mark.parametrize("project", [None, "", "   "], ids=["missing", "empty", "blank"])
def test_missing_or_empty_project_is_rejected(project: str | None) -> None:
    run = run_program("v5e1", project=project, expect_error=True)
    assert isinstance(run.error, ConfigError)
    assert "gcp:project" in str(run.error)
    assert "pulumi config set gcp:project YOUR_PROJECT -s v5e1" in str(run.error)
    assert run.resources == []


def test_several_problems_are_reported_together() -> None:
    run = run_program(
        "v5e1",
        {"tpu-vllm:tpu.chip": "v9-1", "tpu-vllm:vllm.maxModelLen": 0},
        expect_error=True,
    )
    assert isinstance(run.error, ConfigError)
    assert len(run.error.problems) == 2


def test_gcloud_chip_spelling_is_normalized() -> None:
    run = run_program("v5e1", {"tpu-vllm:tpu.chip": "v5litepod-1"})
    assert run.outputs["chip"] == "v5litepod-1"


def test_rejecting_zone_in_a_longer_list_is_skipped_with_a_warning() -> None:
    run = run_program("v5e1", {"tpu-vllm:tpu.zones": ["europe-west4-a", "us-west4-a"]})
    assert run.outputs["zones"] == ["us-west4-a"]
    assert any(
        "skipping europe-west4-a" in w and "FLEX_START provisioning model" in w
        for w in run.warnings
    )


def test_public_endpoint_needs_allow_public() -> None:
    run = run_program(
        "v5e1",
        {"tpu-vllm:access.allowedCidrs": ["0.0.0.0/0"], "tpu-vllm:access.allowPublic": True},
    )
    assert run.outputs["model"] == "google/gemma-4-E2B-it"


def test_unknown_model_with_weights_is_accepted() -> None:
    run = run_program(
        "v5e1", {"tpu-vllm:model.id": "acme/tiny-1b", "tpu-vllm:model.weightsGiB": 2.5}
    )
    assert run.outputs["model"] == "acme/tiny-1b"


def test_spot_has_no_run_limit_and_warns_that_it_bills_until_deleted() -> None:
    run = run_program(
        "v5e1", {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    )
    assert "max_run_cost_usd" not in run.outputs  # optional output: spot has no maximum
    assert run.outputs["hourly_cost_usd"] == pytest.approx(0.58)
    assert any("bills" in w and "pulumi destroy" in w for w in run.warnings)


def test_hourly_cost_override() -> None:
    run = run_program("v6e4", {"tpu-vllm:cost.hourlyUsd": 4.0})
    assert run.outputs["hourly_cost_usd"] == pytest.approx(4.0)
    assert run.outputs["max_run_cost_usd"] == pytest.approx(16.0)


def test_mm_limits_render_in_a_stable_order() -> None:
    # Pulumi's CLI serialises objects with sorted keys; the flag must not change because of it.
    run = run_program("v5e1", {"tpu-vllm:vllm.limitMmPerPrompt": {"audio": 1, "image": 4}})
    assert '{"image":4,"audio":1}' in run.outputs["vllm_args"]


def test_positive_counts_in_extra_args_reach_vllm() -> None:
    extra = ["--max-num-seqs", "64", "--stream-interval=4"]
    run = run_program("v5e1", {"tpu-vllm:vllm.extraArgs": extra})
    args = run.outputs["vllm_args"]
    start = args.index("--max-num-seqs")
    assert args[start : start + 3] == extra


def test_non_default_port_is_passed_to_vllm() -> None:
    run = run_program("v5e1", {"tpu-vllm:vllm.port": 8080})
    assert run.outputs["vllm_args"][-2:] == ["--port", "8080"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("4h", 14400), ("90m", 5400), ("2d", 172800), ("1h30m", 5400), ("14400s", 14400)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "4", "h", "4 hours", "-1h", "1.5h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_plain_string_forms_are_accepted() -> None:
    """Values set without --path arrive as strings: lists, the flag's JSON, quoted numbers."""
    run = run_program(
        "v6e4",
        {
            "tpu-vllm:tpu.zones": "us-east5-a, europe-west4-a",
            "tpu-vllm:vllm.limitMmPerPrompt": '{"image":0,"audio":0}',
            "tpu-vllm:vllm.extraArgs": "--disable-log-requests --seed 7",
            "tpu-vllm:vllm.maxModelLen": "32768",
            "tpu-vllm:access.allowedCidrs": "10.0.0.0/8,192.168.0.0/16",
        },
    )
    assert run.outputs["zones"] == ["us-east5-a", "europe-west4-a"]
    args = run.outputs["vllm_args"]
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--limit-mm-per-prompt") + 1] == '{"image":0,"audio":0}'
    assert "--seed" in args and args[args.index("--seed") + 1] == "7"
    rules = {r.name: r.inputs for r in run.of_type("gcp:compute/firewall:Firewall")}
    assert rules["tpu-serving"]["sourceRanges"] == ["10.0.0.0/8", "192.168.0.0/16"]


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_ssh_cidrs_left_to_default_warns_naming_the_key(preview: bool) -> None:
    """The deployer's own address must reach port 22; a default that may omit it is named."""
    run = run_program("v5e1", preview=preview)
    [warning] = [w for w in run.warnings if "access.sshCidrs" in w]
    assert "tpu-vllm:access.sshCidrs is not set" in warning
    assert "203.0.113.0/24" in warning  # what port 22 admits instead
    assert "Fix: set tpu-vllm:access.sshCidrs to YOUR.IP/32." in warning
    # Outside sshCidrs the node's deny rule drops the packets, so every dial times out: the
    # wait is the timed-out dial budget (~32 min), not the ~10 min of refused dials.
    timed_out = ssh_dial.dial_budget_seconds(
        seconds_per_failed_dial=ssh_dial.PER_DIAL_TIMEOUT_SECONDS
    )
    assert f"fails after ~{round(timed_out / 60)} min." in warning
    assert round(timed_out / 60) == 32


def test_ssh_cidrs_set_gives_no_default_warning() -> None:
    run = run_program("v5e1", {"tpu-vllm:access.sshCidrs": ["198.51.100.7/32"]})
    assert not [w for w in run.warnings if "sshCidrs is not set" in w]


def test_a_section_key_set_without_path_is_refused_not_ignored() -> None:
    """`pulumi config set tpu-vllm:tpu.chip v6e-4` (no `--path`) stores a key named
    `tpu.chip` that no section holds: refused with the fix, never silently ignored (the real
    CLI run in tests/engine/test_engine_failures.py is where this showed)."""
    from components.config.loader import stray_key_problems

    [problem] = stray_key_problems(["tpu-vllm:tpu.chip", "tpu-vllm:tpu", "gcp:project"])
    assert "tpu-vllm:tpu.chip" in problem and "--path 'tpu-vllm:tpu.chip'" in problem
    assert "pulumi config rm tpu-vllm:tpu.chip" in problem
    [unknown] = stray_key_problems(["tpu-vllm:chip"])
    assert "not a tpu-vllm setting" in unknown
    assert stray_key_problems(["tpu-vllm:backend", "tpu-vllm:vllm", "other:tpu.chip"]) == []
