"""Benchmark a tpu-vllm stack with vLLM's own `vllm bench serve`, run on the TPU VM.

A stack is bought for its throughput and cost per token, and a deployment not measured the way
the reference run was cannot be compared with it. So this runs the load generator shipped in
the serving image, on the node against 127.0.0.1 (no network in the numbers), and the API key
never leaves the node's file (scripts/remote/bench_serve.sh). Usage and the reference's source:
docs/operations.md "Benchmark".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from matplotlib.figure import Figure

from components.config import DEFAULT_IMAGE, NAMESPACE, VLLM_DEFAULT_PORT
from components.messages import operator_line, show
from components.remote_scripts import API_KEY_FILE, HEADER, HF_TOKEN_FILE, REMOTE
from components.vm.node_scripts import CONTAINER_SECRETS
from components.vm.ssh import SSH_USER
from components.vm.vllm import CONTAINER
from scripts.stack_files import StackFileError, model_id, read_config, section

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROG = "bench"
DEFAULT_CONCURRENCY = (1, 4, 16, 64)
DEFAULT_INPUT_LENS = (128, 1024)
DEFAULT_OUTPUT_LEN = 256
#: Owned by the SSH user; `~` is expanded by the node's shell.
HOST_RESULT_DIR = "~/.tpu-vllm/bench"
CONTAINER_RESULT_DIR = "/results"
#: The key goes into the variable vLLM's client sends as `Authorization: Bearer`, never argv.
BENCH_ENTRY = (
    "set -eu; "
    f"OPENAI_API_KEY=$(cat {CONTAINER_SECRETS}/{API_KEY_FILE}); export OPENAI_API_KEY; "
    'exec vllm bench serve "$@"'
)
#: vllm/benchmarks/serve.py, `--save-result`.
REQUIRED_FIELDS = (
    "max_concurrency",
    "completed",
    "total_input_tokens",
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "mean_itl_ms",
)
#: Our `--metadata` keys, which vLLM copies to the top level of the result JSON.
META_INPUT_LEN = "random_input_len"
META_OUTPUT_LEN = "random_output_len"
SSH_OPTIONS = (
    "StrictHostKeyChecking=yes",
    "GlobalKnownHostsFile=/dev/null",
    "IdentitiesOnly=yes",
    "BatchMode=yes",
    "ConnectTimeout=15",
    "ServerAliveInterval=30",
)


@dataclass(frozen=True)
class Reference:
    """Seed 000's headline (v5e-1, google/gemma-4-E2B-it, vLLM 0.26 nightly, bf16)."""

    label: str = "measured on v5e-1, google/gemma-4-E2B-it"
    output_tok_s: float = 1496.0
    ms_per_token: float = 8.02
    usd_per_million: float = 0.107
    hourly_usd: float = 0.58


SEED_000 = Reference()


class Failure(Exception):
    """``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class StackOutputs:
    """What the benchmark needs from `pulumi stack output` (secrets never printed)."""

    external_ip: str | None
    ssh_private_key: str | None
    ssh_host_key: str | None
    model: str
    hourly_cost_usd: float | None
    chip: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StackOutputs:
        cost = data.get("hourly_cost_usd")
        if cost is not None and not isinstance(cost, int | float):
            raise Failure(f"stack output hourly_cost_usd is not a number: {show(cost)}")
        return cls(
            external_ip=_opt_str(data.get("external_ip")),
            ssh_private_key=_opt_str(data.get("ssh_private_key")),
            ssh_host_key=_opt_str(data.get("ssh_host_key")),
            model=_opt_str(data.get("model")) or "",
            hourly_cost_usd=float(cost) if cost is not None else None,
            chip=_opt_str(data.get("chip")) or "",
        )


def _opt_str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True)
class Server:
    """Where the server listens on the node, and which image it runs (Pulumi.STACK.yaml)."""

    image: str
    port: int


@dataclass(frozen=True)
class RunSpec:
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int

    @property
    def result_file(self) -> str:
        return f"c{self.concurrency}-in{self.input_len}.json"


@dataclass(frozen=True)
class Result:
    """One `vllm bench serve` result file, reduced to the reported metrics."""

    source: str
    model: str
    concurrency: int
    input_len: int
    output_len: int | None
    output_tok_s: float
    req_s: float
    mean_ttft_ms: float
    median_ttft_ms: float
    mean_itl_ms: float
    mean_tpot_ms: float


def log(message: str) -> None:
    print(operator_line(PROG, message), file=sys.stderr, flush=True)


# --- stack outputs and config ----------------------------------------------------------------


def read_stack_outputs(stack: str) -> StackOutputs:
    """Its stdout is never echoed."""
    argv = ["pulumi", "stack", "output", "--json", "--show-secrets", "-s", stack]
    try:
        done = subprocess.run(
            argv, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False, timeout=120
        )
    except FileNotFoundError:
        raise Failure(
            "the pulumi CLI is not on PATH (https://www.pulumi.com/docs/install/); "
            "with --from-results, --hourly-cost USD avoids it"
        ) from None
    except subprocess.TimeoutExpired:
        raise Failure(f"`pulumi stack output -s {stack}` did not answer in 120 s") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:500] or f"exit status {done.returncode}"
        raise Failure(f"`pulumi stack output -s {stack}` failed: {detail}")
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise Failure(f"`pulumi stack output -s {stack}` did not print JSON") from None
    if not isinstance(data, dict):
        raise Failure(f"`pulumi stack output -s {stack}` did not print a JSON object")
    return StackOutputs.from_json(data)


def stack_file_model(stack: str, stack_file: Path | None = None) -> str:
    """What `--dry-run` renders without Pulumi."""
    path = stack_file or PROJECT_ROOT / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise Failure(
            f"no stack file {path}: --dry-run reads the model from it. Pass an existing stack "
            "(or --stack-file PATH)"
        )
    try:
        found = model_id(read_config(path), path)
    except StackFileError as error:
        raise Failure(str(error).rstrip(".")) from None
    if not found:
        raise Failure(f"{path} has no `{NAMESPACE}:model.id`; set it to the served model")
    return found


def read_server(stack: str, stack_file: Path | None = None) -> Server:
    """`tpu-vllm:vllm.image` and `.port` from Pulumi.STACK.yaml, with the program's defaults."""
    path = stack_file or PROJECT_ROOT / f"Pulumi.{stack}.yaml"
    try:
        vllm = section(read_config(path), "vllm", path) if path.is_file() else {}
    except StackFileError as error:
        raise Failure(str(error).rstrip(".")) from None
    image = vllm.get("image", DEFAULT_IMAGE)
    port = vllm.get("port", VLLM_DEFAULT_PORT)
    if not isinstance(image, str) or not image.strip():
        raise Failure(f"{path}: `{NAMESPACE}:vllm.image` must be an image reference")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise Failure(f"{path}: `{NAMESPACE}:vllm.port` must be a port number, not {show(port)}")
    return Server(image=image.strip(), port=port)


# --- the remote command ----------------------------------------------------------------------


def bench_args(spec: RunSpec, model: str, port: int) -> list[tuple[str, tuple[str, ...]]]:
    """Names checked against vllm/benchmarks/serve.py and vllm/benchmarks/datasets/arg_utils.py."""
    return [
        ("--backend", ("openai-chat",)),
        # -it models answer /v1/completions with an empty string (seed 000 §1.4).
        ("--endpoint", ("/v1/chat/completions",)),
        ("--base-url", (f"http://127.0.0.1:{port}",)),
        ("--model", (model,)),
        ("--dataset-name", ("random",)),
        ("--random-input-len", (str(spec.input_len),)),
        ("--random-output-len", (str(spec.output_len),)),
        # Every request generates exactly --random-output-len tokens.
        ("--ignore-eos", ()),
        ("--num-prompts", (str(spec.num_prompts),)),
        ("--max-concurrency", (str(spec.concurrency),)),
        # Copied into the result JSON, so a result file says which run it is.
        (
            "--metadata",
            (f"{META_INPUT_LEN}={spec.input_len}", f"{META_OUTPUT_LEN}={spec.output_len}"),
        ),
        ("--disable-tqdm", ()),
        ("--save-result", ()),
        ("--result-dir", (CONTAINER_RESULT_DIR,)),
        ("--result-filename", (spec.result_file,)),
    ]


def docker_run_words(spec: RunSpec, model: str, server: Server) -> list[str]:
    """The benchmark's `docker run`, one option (with its quoted values) per word."""
    q = shlex.quote
    secret = f"~/.tpu-vllm/secrets/{{0}}:{CONTAINER_SECRETS}/{{0}}:ro"
    words = [
        "sudo docker run",
        "--rm",
        "--net=host",
        f"-v {secret.format(API_KEY_FILE)}",
        # The tokenizer of a gated model needs the HF token; the server's HF cache is reused.
        f"-v {secret.format(HF_TOKEN_FILE)}",
        f"-e HF_TOKEN_PATH={CONTAINER_SECRETS}/{HF_TOKEN_FILE}",
        "-v /dev/shm:/dev/shm",
        "-e HF_HOME=/dev/shm",
        f"-v {HOST_RESULT_DIR}:{CONTAINER_RESULT_DIR}",
        "--entrypoint /bin/sh",
        q(server.image),
        f"-c {q(BENCH_ENTRY)}",
        "vllm-bench",  # $0 of the inline script; the flags below are its "$@"
    ]
    words += [
        " ".join([flag, *map(q, values)]) for flag, values in bench_args(spec, model, server.port)
    ]
    return words


def render_remote(spec: RunSpec, model: str, server: Server) -> str:
    """The shell text sent to the node for one run (scripts/remote/bench_serve.sh, filled)."""
    template = (REMOTE / "bench_serve.sh").read_text(encoding="utf-8")
    values = {
        "CONTAINER": shlex.quote(CONTAINER),
        "HOST_RESULT_DIR": HOST_RESULT_DIR,
        "RESULT_FILE": shlex.quote(spec.result_file),
        "DOCKER_RUN": " \\\n  ".join(docker_run_words(spec, model, server)),
    }
    for key, value in values.items():
        marker = f"@{key}@"
        if marker not in template:
            raise KeyError(f"{marker} is not in bench_serve.sh")
        template = template.replace(marker, value)
    return HEADER + template


# --- SSH -------------------------------------------------------------------------------------


class Node:
    """Verified against the pinned host key; the keys live in a private temp dir."""

    def __init__(self, outputs: StackOutputs) -> None:
        if not outputs.external_ip:
            raise Failure(
                "the stack has no external_ip (a flex-start run may have ended): "
                "run `pulumi up --refresh` first"
            )
        if not outputs.ssh_private_key:
            raise Failure("the stack has no ssh_private_key output")
        if not outputs.ssh_host_key:
            raise Failure(
                "the stack has no pinned ssh_host_key; refusing to connect to an unverified node"
            )
        self.host = outputs.external_ip
        self._private_key = outputs.ssh_private_key
        self._host_key = outputs.ssh_host_key
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Node:
        self._dir = tempfile.TemporaryDirectory(prefix="tpu-vllm-bench-")
        root = Path(self._dir.name)
        os.chmod(root, 0o700)
        key = root / "id"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(self._private_key.rstrip("\n") + "\n")
        (root / "known_hosts").write_text(f"{self.host} {self._host_key}\n")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def argv(self) -> list[str]:
        assert self._dir is not None, "use Node as a context manager"
        root = Path(self._dir.name)
        argv = ["ssh", "-i", str(root / "id"), "-o", f"UserKnownHostsFile={root / 'known_hosts'}"]
        for option in SSH_OPTIONS:
            argv += ["-o", option]
        return [*argv, f"{SSH_USER}@{self.host}", "bash -s"]

    def run(self, script: str) -> str:
        """Its stderr streams through, its stdout is returned."""
        done = subprocess.run(
            self.argv(), input=script, stdout=subprocess.PIPE, text=True, check=False
        )
        if done.returncode == 255:  # ssh's own failure: unreachable, or the host key differs
            raise Failure(f"ssh could not connect to or verify {self.host} (exit 255)", code=1)
        if done.returncode != 0:
            raise Failure(f"the remote run exited with status {done.returncode}", code=1)
        return done.stdout


# --- results ---------------------------------------------------------------------------------


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Failure(f"{where}: `{key}` is not a number ({show(value)})")
    return float(value)


def _meta_int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        raise Failure(f"{where}: `{key}` is not an integer ({show(value)})") from None


def parse_result(data: Any, where: str) -> Result:
    """Check one vLLM result document and keep the reported metrics."""
    if not isinstance(data, dict):
        raise Failure(f"{where}: not a `vllm bench serve --save-result` file (not an object)")
    missing = [key for key in REQUIRED_FIELDS if key not in data]
    if missing:
        raise Failure(
            f"{where}: not a `vllm bench serve --save-result` file; missing {', '.join(missing)}"
        )
    concurrency = data["max_concurrency"]
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise Failure(
            f"{where}: `max_concurrency` must be a positive integer ({show(concurrency)})"
        )
    completed = int(_number(data, "completed", where))
    if completed < 1:
        raise Failure(f"{where}: no request completed (see `errors` with --save-detailed)")
    failed = data.get("failed")
    if isinstance(failed, int) and failed > 0:
        log(f"warning: {where}: {failed} request(s) failed; its throughput counts only the rest")
    input_len = _meta_int(data, META_INPUT_LEN, where)
    if input_len is None:  # a result file from another run: the mean prompt length
        input_len = round(_number(data, "total_input_tokens", where) / completed)
    return Result(
        source=where,
        model=str(data.get("model_id") or ""),
        concurrency=concurrency,
        input_len=input_len,
        output_len=_meta_int(data, META_OUTPUT_LEN, where),
        output_tok_s=_number(data, "output_throughput", where),
        req_s=_number(data, "request_throughput", where),
        mean_ttft_ms=_number(data, "mean_ttft_ms", where),
        median_ttft_ms=_number(data, "median_ttft_ms", where),
        mean_itl_ms=_number(data, "mean_itl_ms", where),
        mean_tpot_ms=_number(data, "mean_tpot_ms", where),
    )


def load_result_file(path: Path) -> Result:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise Failure(f"cannot read {path}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise Failure(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
            "a truncated or interrupted run? Run it again"
        ) from None
    return parse_result(data, str(path))


def load_results(directory: Path, grid: Sequence[tuple[int, int]]) -> list[Result]:
    """Every result for the requested (concurrency, input length) grid; a gap is an error."""
    if not directory.is_dir():
        raise Failure(f"{directory} is not a directory")
    files = sorted(p for p in directory.glob("*.json") if not p.name.endswith(".pytorch.json"))
    if not files:
        raise Failure(f"no result files (*.json) in {directory}")
    found: dict[tuple[int, int], Result] = {}
    for path in files:
        result = load_result_file(path)
        key = (result.concurrency, result.input_len)
        if key in found:
            raise Failure(
                f"two results for concurrency {key[0]}, input {key[1]}: "
                f"{found[key].source} and {path}"
            )
        found[key] = result
    missing = [key for key in grid if key not in found]
    if missing:
        listed = ", ".join(f"concurrency {c} / input {n}" for c, n in missing)
        raise Failure(f"{directory}: no result for {listed}")
    extra = sorted(set(found) - set(grid))
    if extra:
        log(f"ignoring {len(extra)} result(s) outside the requested grid: {extra}")
    return [found[key] for key in sorted(grid, key=lambda k: (k[1], k[0]))]


# --- report ----------------------------------------------------------------------------------


def usd_per_million(hourly_usd: float, output_tok_s: float) -> float | None:
    """At full load: hourly / (tok/s x 3600) x 1e6."""
    if output_tok_s <= 0:
        return None
    return hourly_usd / (output_tok_s * 3600) * 1e6


def _describe(outputs: StackOutputs, results: Sequence[Result]) -> tuple[str, str]:
    """Chip and model for titles: the stack's outputs, else the model the results name."""
    models = sorted({r.model for r in results if r.model})
    return outputs.chip or "unknown chip", outputs.model or ", ".join(models) or "unknown model"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.3f}"


def render_markdown(
    stack: str,
    outputs: StackOutputs,
    results: Sequence[Result],
    hourly_usd: float | None,
    reference: Reference = SEED_000,
) -> str:
    chip, model = _describe(outputs, results)
    out_lens = sorted({r.output_len for r in results if r.output_len is not None})
    price = f"${hourly_usd:g}/h" if hourly_usd is not None else "no price"
    per_request = f" of {', '.join(map(str, out_lens))} tokens each" if out_lens else ""
    lines = [
        f"# vLLM benchmark: stack `{stack}` ({chip}, `{model}`)",
        "",
        "`vllm bench serve`, run on the node inside the serving image against 127.0.0.1: backend "
        f"`openai-chat`, random prompts, fixed-length outputs{per_request}. Input len counts the "
        "random prompt's tokens, before the chat template. TTFT includes time queued at the "
        "server. ITL is the mean gap between streamed chunks, TPOT the mean "
        "(latency - TTFT) / (output tokens - 1) per request.",
        "",
        f"Price {price} (`hourly_cost_usd`); $ per million output tokens = "
        "hourly / (output tok/s x 3600) x 1e6, i.e. at the measured load, around the clock.",
        "",
        "| concurrency | input len | output tok/s | mean TTFT ms | median TTFT ms "
        "| mean ITL ms | mean TPOT ms | req/s | $ per M output tok |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cost = usd_per_million(hourly_usd, r.output_tok_s) if hourly_usd is not None else None
        lines.append(
            f"| {r.concurrency} | {r.input_len} | {_fmt(r.output_tok_s, 1)} "
            f"| {_fmt(r.mean_ttft_ms)} | {_fmt(r.median_ttft_ms)} | {_fmt(r.mean_itl_ms)} "
            f"| {_fmt(r.mean_tpot_ms)} | {_fmt(r.req_s)} | {_money(cost)} |"
        )
    best = max(results, key=lambda r: r.output_tok_s)
    best_cost = usd_per_million(hourly_usd, best.output_tok_s) if hourly_usd is not None else None
    singles = [r for r in results if r.concurrency == 1]
    single = min(singles, key=lambda r: r.input_len) if singles else None
    single_text = (
        f"ITL {single.mean_itl_ms:.2f} / TPOT {single.mean_tpot_ms:.2f} "
        f"(concurrency 1, input {single.input_len})"
        if single
        else "not measured (no concurrency-1 run)"
    )
    ref_cost = f"${reference.usd_per_million:.3f} at ${reference.hourly_usd:.2f}/h"
    lines += [
        "",
        f"## Against the reference: {reference.label}",
        "",
        "The reference is the project's measured run on a **v5e-1 with Gemma 4 E2B** (spot "
        "price); it compares directly only with the `v5e1` stack.",
        "",
        f"| | reference ({reference.label}) | measured (`{stack}`, {chip}) |",
        "|---|---:|---:|",
        f"| aggregate output tok/s (best) | {reference.output_tok_s:,.0f} "
        f"| {best.output_tok_s:,.1f} (concurrency {best.concurrency}, input {best.input_len}) |",
        f"| single-stream ms per token | {reference.ms_per_token:.2f} | {single_text} |",
        f"| $ per million output tokens | {ref_cost} | {_money(best_cost)} at {price} |",
        "",
    ]
    return "\n".join(lines)


def render_chart(
    stack: str,
    outputs: StackOutputs,
    results: Sequence[Result],
    path: Path,
    reference: Reference = SEED_000,
) -> None:
    """Three panels against concurrency, one line per input length; the reference dashed."""
    panels: Sequence[tuple[str, Callable[[Result], float], float | None]] = (
        ("output tok/s (aggregate)", lambda r: r.output_tok_s, reference.output_tok_s),
        ("mean TTFT (ms)", lambda r: r.mean_ttft_ms, None),
        ("mean inter-token latency (ms)", lambda r: r.mean_itl_ms, reference.ms_per_token),
    )
    figure = Figure(figsize=(15, 4.6), layout="constrained")
    chip, model = _describe(outputs, results)
    figure.suptitle(f"vllm bench serve: {stack} ({chip}, {model})")
    axes = figure.subplots(1, len(panels))
    lengths = sorted({r.input_len for r in results})
    concurrencies = sorted({r.concurrency for r in results})
    for ax, (title, metric, ref_value) in zip(axes, panels, strict=True):
        for length in lengths:
            runs = sorted((r for r in results if r.input_len == length), key=_by_concurrency)
            ax.plot(
                [r.concurrency for r in runs],
                [metric(r) for r in runs],
                marker="o",
                label=f"input {length} tok",
            )
        if ref_value is not None:
            ax.axhline(
                ref_value, color="grey", linestyle="--", label=f"{reference.label} (reference)"
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
        ax.set_xlabel("concurrency (max in-flight requests)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    figure.savefig(path, format="png", dpi=100)


def _by_concurrency(result: Result) -> int:
    return result.concurrency


def write_report(
    stack: str,
    outputs: StackOutputs,
    results: Sequence[Result],
    hourly_usd: float | None,
    out: Path,
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(stack, outputs, results, hourly_usd)
    (out / "bench.md").write_text(markdown + "\n", encoding="utf-8")
    render_chart(stack, outputs, results, out / "bench.png")
    return markdown


# --- CLI -------------------------------------------------------------------------------------


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,4,16")
    return tuple(dict.fromkeys(values))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _csv(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench",
        description="Run `vllm bench serve` on a tpu-vllm stack's node and report the results. "
        "One run per (concurrency, input length); each takes minutes of TPU time.",
        epilog="The node, its keys and the price come from `pulumi stack output -s STACK`; "
        "--dry-run needs no Pulumi CLI (it reads the model, image and port from the stack "
        "file). Exit status: 0 done, 2 a problem you can fix, 1 a failed remote run.",
    )
    parser.add_argument("stack", help="Pulumi stack, e.g. v5e1")
    parser.add_argument(
        "--concurrency",
        type=_positive_ints,
        default=DEFAULT_CONCURRENCY,
        metavar="N,N,...",
        help=f"concurrent requests per run, comma-separated (default: {_csv(DEFAULT_CONCURRENCY)})",
    )
    parser.add_argument(
        "--input-lens",
        type=_positive_ints,
        default=DEFAULT_INPUT_LENS,
        metavar="N,N,...",
        help=f"prompt lengths in tokens, comma-separated (default: {_csv(DEFAULT_INPUT_LENS)})",
    )
    parser.add_argument(
        "--output-len",
        type=_positive_int,
        default=DEFAULT_OUTPUT_LEN,
        metavar="N",
        help="tokens generated per request (default: %(default)s)",
    )
    parser.add_argument(
        "--num-prompts",
        type=_positive_int,
        default=None,
        metavar="N",
        help="prompts per run (default: 10 x concurrency, at least 20)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="report directory (default: bench-results/STACK-YYYYmmdd-HHMMSS, or with "
        "--from-results the results directory itself)",
    )
    parser.add_argument(
        "--from-results",
        type=Path,
        default=None,
        metavar="DIR",
        help="skip the node: report on the result JSON files in DIR (default: run on the node)",
    )
    parser.add_argument(
        "--hourly-cost",
        type=float,
        default=None,
        metavar="USD",
        help="price per hour to use instead of the stack's hourly_cost_usd "
        "(default: the hourly_cost_usd output; with --from-results, Pulumi is then not asked "
        "at all)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the remote scripts and connect to nothing; needs no Pulumi CLI (default: off)",
    )
    parser.add_argument(
        "--stack-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="stack config for the model, image and port (default: Pulumi.STACK.yaml in the "
        "project root)",
    )
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> list[RunSpec]:
    return [
        RunSpec(
            concurrency=c,
            input_len=n,
            output_len=args.output_len,
            num_prompts=args.num_prompts or max(20, 10 * c),
        )
        for n in args.input_lens
        for c in args.concurrency
    ]


def collect(node: Node, specs: Iterable[RunSpec], model: str, server: Server, dest: Path) -> None:
    """Each result JSON is checked before it is saved under dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        log(
            f"concurrency {spec.concurrency}, input {spec.input_len}, output {spec.output_len}, "
            f"{spec.num_prompts} prompts"
        )
        try:
            text = node.run(render_remote(spec, model, server))
            parse_result(json.loads(text), f"{spec.result_file} from the node")
        except json.JSONDecodeError:
            raise Failure(
                f"{spec.result_file}: the node returned no result JSON; results so far are in "
                f"{dest}",
                1,
            ) from None
        except Failure as failure:
            raise Failure(f"{failure}; results so far are in {dest}", failure.code) from None
        (dest / spec.result_file).write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = plan(args)
        grid = [(s.concurrency, s.input_len) for s in specs]
        if args.dry_run:
            # Only the stack file: a dry run must work before `pulumi up`, and without the CLI.
            model = stack_file_model(args.stack, args.stack_file)
            server = read_server(args.stack, args.stack_file)
            for spec in specs:
                print(f"# --- {spec.result_file} ---\n{render_remote(spec, model, server)}")
            return 0
        if args.from_results is not None and args.hourly_cost is not None:
            outputs = StackOutputs(None, None, None, "", None, "")
        else:
            outputs = read_stack_outputs(args.stack)
        hourly = args.hourly_cost if args.hourly_cost is not None else outputs.hourly_cost_usd
        if args.from_results is not None:
            results_dir: Path = args.from_results
            out: Path = args.out or results_dir
        else:
            if not outputs.model:
                raise Failure("the stack has no `model` output; is it deployed?")
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            out = args.out or Path("bench-results") / f"{args.stack}-{stamp}"
            results_dir = out / "results"
            server = read_server(args.stack, args.stack_file)
            with Node(outputs) as node:
                collect(node, specs, outputs.model, server, results_dir)
        results = load_results(results_dir, grid)
        markdown = write_report(args.stack, outputs, results, hourly, out)
    except Failure as failure:
        fail(str(failure), failure.code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    print(markdown)
    log(f"wrote {out / 'bench.md'} and {out / 'bench.png'}")
    return 0


def fail(message: str, code: int) -> NoReturn:
    log(f"error: {message}")
    raise SystemExit(code)


if __name__ == "__main__":
    sys.exit(main())
