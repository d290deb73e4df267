"""The `vllm` section: the image, the port and the `vllm serve` flags, in seed 000's order."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from components import catalog, image_ref
from components.catalog import Chip
from components.config.keys import NAMESPACE
from components.config.reader import (
    Reader,
    as_args,
    as_bool,
    as_float,
    as_int,
    as_str,
    parse_positive_duration,
)
from components.messages import show

# vLLM's default port: the flag is rendered only when the stack asks for another one.
VLLM_DEFAULT_PORT = 8000
DEFAULT_IMAGE = "vllm/vllm-tpu:nightly"
# Sources of these defaults: docs/configuration.md, "The catalog".
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_READINESS_TIMEOUT = "30m"  # about twice a cold start on v5e-1 (857 s)
# A fixed order, so the rendered flag is stable whatever order the object arrives in.
MM_MODALITY_ORDER = ("image", "audio", "video")
# Flags that have a key of their own, so `extraArgs` may not repeat them.
FLAG_KEYS: Mapping[str, str] = {
    "--dtype": "vllm.dtype",
    "--kv-cache-dtype": "vllm.kvCacheDtype",
    "--max-model-len": "vllm.maxModelLen",
    "--max-num-batched-tokens": "vllm.maxNumBatchedTokens",
    "--tensor-parallel-size": "vllm.tensorParallelSize",
    "-tp": "vllm.tensorParallelSize",
    "--gpu-memory-utilization": "vllm.gpuMemoryUtilization",
    "--enable-prefix-caching": "vllm.enablePrefixCaching",
    "--tool-call-parser": "vllm.toolCallParser",
    "--enable-auto-tool-choice": "vllm.toolCallParser",
    "--reasoning-parser": "vllm.reasoningParser",
    "--limit-mm-per-prompt": "vllm.limitMmPerPrompt",
    "--port": "vllm.port",
}
# Flags `extraArgs` may carry whose value vLLM declares `ge=1` (vllm/config/scheduler.py): 0 would
# pass here, then stop vLLM's boot while the TPU bills.
POSITIVE_INT_FLAGS: tuple[str, ...] = (
    "--max-num-seqs",
    "--max-num-partial-prefills",
    "--max-long-partial-prefills",
    "--stream-interval",
)
# Flags that would put a secret on the command line, where `ps` and `docker inspect` show it.
FORBIDDEN_FLAGS: Mapping[str, str] = {
    "--api-key": "the API key is generated per stack and handed to vLLM from a file",
    "--hf-token": "the HF token is read by the container from a mounted file",
}


@dataclass(frozen=True)
class VllmSettings:
    image: str  # as configured: a tag is pinned by components/image_pin.py
    image_upgrade: str
    registry_endpoint: str
    port: int
    dtype: str
    kv_cache_dtype: str
    max_model_len: int | None
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    tool_call_parser: str | None
    reasoning_parser: str | None
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None
    extra_args: tuple[str, ...]
    readiness_timeout_seconds: int

    def serve_args(self) -> list[str]:
        """The `vllm serve MODEL` flags, in seed 000 §1.3's order, one value per element."""
        args = ["--dtype", self.dtype, "--kv-cache-dtype", self.kv_cache_dtype]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        args += ["--gpu-memory-utilization", _format_number(self.gpu_memory_utilization)]
        if self.enable_prefix_caching:
            args.append("--enable-prefix-caching")
        args += list(self.extra_args)
        if self.limit_mm_per_prompt is not None:
            limits = json.dumps(dict(self.limit_mm_per_prompt), separators=(",", ":"))
            args += ["--limit-mm-per-prompt", limits]
        if self.tool_call_parser:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.reasoning_parser:
            args += ["--reasoning-parser", self.reasoning_parser]
        if self.port != VLLM_DEFAULT_PORT:
            args += ["--port", str(self.port)]
        return args


def _is_base_url(text: str) -> bool:
    try:
        url = urllib.parse.urlsplit(text)
        url.port  # noqa: B018 - parsing it is the check (ValueError when out of range)
    except ValueError:
        return False
    plain = not (url.query or url.fragment or url.username or url.password)
    return (
        url.scheme in ("http", "https") and bool(url.hostname) and url.path in ("", "/") and plain
    )


def _format_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and value > 1 else repr(float(value))


def parse_vllm(r: Reader, chip: Chip | None) -> VllmSettings | None:
    before = len(r.problems)
    image = r.get("image", as_str, DEFAULT_IMAGE, "an image reference")
    try:
        image_ref.parse(image)
    except image_ref.ImageRefError as error:
        r.fail("image", image, f"not an image reference: {error}. Fix: {image_ref.EXAMPLE}")
    upgrade = r.get("imageUpgrade", as_str, "", "a label such as 2026-12-03")
    endpoint = r.get("registryEndpoint", as_str, "", "a URL such as https://mirror.example.com")
    if endpoint and not _is_base_url(endpoint):
        r.fail(
            "registryEndpoint",
            endpoint,
            "not a registry base URL. Fix: scheme, host and optional port only, e.g. "
            "https://mirror.example.com or http://127.0.0.1:5000 (the lookup adds /v2/...)",
        )
    port = r.get("port", as_int, VLLM_DEFAULT_PORT, "a port number")
    if not 1024 <= port <= 65535:
        r.fail(
            "port",
            port,
            "not an unprivileged port. Fix: use one in 1024-65535 (vLLM's default is 8000)",
        )
    dtype = r.get("dtype", as_str, "bfloat16", "a dtype such as bfloat16")
    if dtype not in catalog.MODEL_DTYPES:
        note = "bfloat16 is the only one that runs Gemma 4 on TPU, measured on v5e-1"
        r.fail_choice("dtype", dtype, "dtype", sorted(catalog.MODEL_DTYPES), note)
    kv = r.get("kvCacheDtype", as_str, "auto", "a KV-cache dtype such as auto")
    _check_kv_cache_dtype(r, kv)
    max_model_len = r.get("maxModelLen", as_int, None, "a token count, e.g. 32768")
    if max_model_len is not None and max_model_len <= 0:
        r.fail("maxModelLen", max_model_len, "must be positive. Fix: a token count, e.g. 32768")
    batched = r.get("maxNumBatchedTokens", as_int, None, "a token count, e.g. 4096")
    if batched is not None and batched <= 0:
        r.fail(
            "maxNumBatchedTokens",
            batched,
            "must be positive (vLLM refuses to boot otherwise). Fix: a token count, e.g. 4096, "
            "or remove the key for vLLM's default",
        )
    tp = r.get("tensorParallelSize", as_int, chip.chips if chip else 1, "an integer")
    if tp < 1:
        r.fail(
            "tensorParallelSize",
            tp,
            "must be positive. Fix: "
            + (f"set it to {chip.chips} (the chip count)" if chip else "the chip count")
            + " or remove the key",
        )
    elif chip is not None and tp != chip.chips:
        r.fail(
            "tensorParallelSize",
            tp,
            f"{chip.name} is a single host with {chip.chips} "
            f"chip(s); tensor parallelism must equal that. Fix: set it to {chip.chips} "
            "or remove the key",
        )
    util = r.get("gpuMemoryUtilization", as_float, DEFAULT_GPU_MEMORY_UTILIZATION, "a fraction")
    if not 0 < util <= 1:
        r.fail("gpuMemoryUtilization", util, "must be in (0, 1]. Fix: e.g. 0.92, the default")
    prefix = r.get("enablePrefixCaching", as_bool, False, "true or false")
    tool_parser = r.get("toolCallParser", as_str, None, "a parser name such as gemma4")
    reasoning = r.get("reasoningParser", as_str, None, "a parser name such as gemma4")
    limits = _parse_mm_limits(r)
    no_extra: tuple[str, ...] = ()
    extra = r.get("extraArgs", as_args, no_extra, "a list of strings")
    _check_extra_args(r, extra)
    timeout = parse_positive_duration(r, "readinessTimeout", DEFAULT_READINESS_TIMEOUT)
    if len(r.problems) != before:
        return None
    return VllmSettings(
        image=image,
        image_upgrade=upgrade,
        registry_endpoint=endpoint.rstrip("/"),
        port=port,
        dtype=dtype,
        kv_cache_dtype=kv,
        max_model_len=max_model_len,
        max_num_batched_tokens=batched,
        tensor_parallel_size=tp,
        gpu_memory_utilization=util,
        enable_prefix_caching=prefix,
        tool_call_parser=tool_parser,
        reasoning_parser=reasoning,
        limit_mm_per_prompt=limits,
        extra_args=extra,
        readiness_timeout_seconds=timeout,
    )


def _check_kv_cache_dtype(r: Reader, kv: str) -> None:
    if kv in catalog.KV_CACHE_DTYPES:
        return
    known = ", ".join(sorted(catalog.KV_CACHE_DTYPES))
    if kv in catalog.KV_CACHE_DTYPES_KILLING_BOOT or kv.startswith(
        catalog.KV_CACHE_DTYPE_KILLING_PREFIXES
    ):
        r.fail(
            "kvCacheDtype",
            kv,
            "vLLM's CLI accepts it, then the server dies at boot on TPU "
            f"(measured on v5e-1), after you have paid for the wait. Fix: one of {known}",
        )
    elif kv in catalog.KV_CACHE_DTYPES_REJECTED_BY_CLI:
        r.fail("kvCacheDtype", kv, f"rejected by vLLM's CLI. Fix: one of {known}")
    else:
        r.fail_choice("kvCacheDtype", kv, "KV-cache dtype", sorted(catalog.KV_CACHE_DTYPES))


def _parse_mm_limits(r: Reader) -> tuple[tuple[str, int], ...] | None:
    raw = r.values.get("limitMmPerPrompt")
    if raw is None:
        return None
    if isinstance(raw, str):  # the flag's own JSON, as vLLM takes it: '{"image":4}'
        with contextlib.suppress(ValueError):
            raw = json.loads(raw)
    if not isinstance(raw, Mapping) or not raw:
        r.fail(
            "limitMmPerPrompt", raw, "not an object. Fix: an object such as {image: 4, audio: 1}"
        )
        return None
    limits: dict[str, int] = {}
    for modality, count in raw.items():
        try:
            limits[str(modality)] = as_int(count)
        except (TypeError, ValueError):
            r.fail(
                f"limitMmPerPrompt.{modality}", count, "not a count. Fix: a non-negative integer"
            )
            return None
        if limits[str(modality)] < 0:
            r.fail(
                f"limitMmPerPrompt.{modality}", count, "not a count. Fix: a non-negative integer"
            )
            return None
    order = [m for m in MM_MODALITY_ORDER if m in limits] + sorted(
        m for m in limits if m not in MM_MODALITY_ORDER
    )
    return tuple((m, limits[m]) for m in order)


def _check_extra_args(r: Reader, extra: Sequence[str]) -> None:
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in FORBIDDEN_FLAGS:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} would put a secret on the command line; "
                f"{FORBIDDEN_FLAGS[flag]}. Fix: remove it",
            )
        elif flag in FLAG_KEYS:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} has a key of its own. Fix: set `{NAMESPACE}:{FLAG_KEYS[flag]}` instead",
            )
    for flag, value in _flag_values(extra, POSITIVE_INT_FLAGS):
        try:
            positive = as_int(value) >= 1
        except (TypeError, ValueError):
            positive = False
        if not positive:
            r.fail(
                "extraArgs",
                list(extra),
                f"{flag} takes a positive integer (here "
                f"{'nothing follows it' if value is None else show(value)}); vLLM refuses to "
                f"boot otherwise. Fix: a whole number of at least 1 after {flag}, or drop it",
            )


def _flag_values(extra: Sequence[str], flags: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for each of `flags` in `extra`; None when nothing follows the flag."""
    found: list[tuple[str, str | None]] = []
    for index, arg in enumerate(extra):
        flag, equals, value = arg.partition("=")
        if flag not in flags:
            continue
        if equals:
            found.append((flag, value))
        else:
            found.append((flag, extra[index + 1] if index + 1 < len(extra) else None))
    return found
