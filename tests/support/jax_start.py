"""The JAX side of a server start, run as a fresh process by the real-JAX tests and benchmark.

    python tests/support/jax_start.py --cache-dir DIR --workload small [--functions N]
    python tests/support/jax_start.py --cache-dir DIR --workload transformer

It does what tpu-inference does when the engine starts (vllm-project/tpu-inference
`tpu_inference/runner/compilation_manager.py`, `CompilationManager.__init__`): it points
`jax_compilation_cache_dir` at the cache directory with `jax.config.update`, and leaves every
other option to the environment, as in the container. Then it compiles each function once and
runs it, as the precompile phase does, and prints one JSON line:
- `requests`, `hits`, `misses`: the `jax.monitoring` events `/jax/compilation_cache/`
  `compile_requests_use_cache` and `cache_hits` (jax/_src/compiler.py `compile_or_get_cached`)
  and `cache_misses` (jax/_src/compilation_cache.py `put_executable_and_time`: recorded only
  when an entry is written, so a compile under the threshold is a request that is neither);
- `entries`: the `*-cache` files in the cache directory afterwards;
- `seconds`: from before `import jax` to the last result (the time to first result).

Workloads (CPU, `jax_platforms=cpu`):
- `small`: N distinct tiny jitted functions, fed numpy arrays (no helper compiles), so a start
  makes exactly N compile requests;
- `transformer`: a small decoder forward at the padding buckets tpu-inference precompiles
  (`tpu_inference/runner/utils.py` `get_token_paddings` doubles from 16 up to
  `max_num_batched_tokens`; `get_req_paddings` doubles from 8 up to `max_num_seqs`): the
  backbone per token bucket, the logits gather and the sampler per request bucket, scaled
  down to run on CPU in seconds.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()

import argparse  # noqa: E402 - the clock starts before the imports, as a process start does
import json  # noqa: E402
import os  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import monitoring  # noqa: E402

IMPORTED = time.monotonic()

EVENTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "requests",
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/cache_misses": "misses",
}
#: Where a start's time goes (jax/_src/dispatch.py): tracing, lowering to StableHLO, and the
#: XLA compile, or the cache read that replaces it (pxla.py wraps `compile_or_get_cached`).
DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_seconds",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_seconds",
    "/jax/core/compile/backend_compile_duration": "compile_seconds",
}
#: tpu-inference's buckets, scaled down: tokens 16..max_num_batched_tokens, requests 8..max_seqs.
TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024)
REQUEST_BUCKETS = (8, 16, 32, 64, 128)
WIDTH, HEADS, FFN, VOCAB = 128, 4, 512, 2048
#: Decoder blocks, unrolled as in a real model's forward: compile time grows with them.
DEFAULT_LAYERS = 24


def small(count: int) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """N distinct functions (each its own program: the constant is part of it)."""
    x = np.ones((8,), np.float32)

    def make(i: int) -> Callable[..., Any]:
        return jax.jit(lambda v: jnp.tanh(v * (i + 1)).sum() + i)

    return [(make(i), (x,)) for i in range(count)]


def _params(layers: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    return {
        "embed": w(VOCAB, WIDTH),
        "layers": [
            {
                "qkv": w(WIDTH, 3 * WIDTH),
                "out": w(WIDTH, WIDTH),
                "up": w(WIDTH, FFN),
                "down": w(FFN, WIDTH),
            }
            for _ in range(layers)
        ],
    }


def _rms(x: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def _backbone(params: dict[str, Any], ids: jax.Array, positions: jax.Array) -> jax.Array:
    """Embedding, then unrolled blocks of causal attention (with rotary) and an MLP."""
    x = params["embed"][ids]
    tokens = ids.shape[0]
    half = WIDTH // HEADS // 2
    freqs = positions[:, None] / (10000 ** (jnp.arange(half) / half))
    cos, sin = jnp.cos(freqs)[:, None, :], jnp.sin(freqs)[:, None, :]
    mask = jnp.tril(jnp.ones((tokens, tokens), bool))
    for layer in params["layers"]:
        q, k, v = jnp.split(_rms(x) @ layer["qkv"], 3, axis=-1)
        q, k, v = (t.reshape(tokens, HEADS, -1) for t in (q, k, v))

        def rotate(t: jax.Array) -> jax.Array:
            a, b = t[..., :half], t[..., half:]
            return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

        q, k = rotate(q), rotate(k)
        scores = jnp.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1])
        attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        x = x + jnp.einsum("hts,shd->thd", attn, v).reshape(tokens, WIDTH) @ layer["out"]
        x = x + jax.nn.gelu(_rms(x) @ layer["up"]) @ layer["down"]
    return _rms(x)


def _select(hidden: jax.Array, indices: jax.Array) -> jax.Array:
    return hidden[indices]


def _logits(params: dict[str, Any], hidden: jax.Array, indices: jax.Array) -> jax.Array:
    embed: jax.Array = params["embed"]
    return hidden[indices] @ embed.T


def _sample(logits: jax.Array, temperature: jax.Array, key: jax.Array) -> jax.Array:
    greedy = jnp.argmax(logits, axis=-1)
    noise = jax.random.gumbel(key, logits.shape)
    sampled = jnp.argmax(logits / jnp.maximum(temperature[:, None], 1e-5) + noise, axis=-1)
    return jnp.where(temperature > 0, sampled, greedy)


def transformer(layers: int) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    params = _params(layers)
    backbone, select, logits = jax.jit(_backbone), jax.jit(_select), jax.jit(_logits)
    # The key as raw threefry data (uint32[2]): no helper compile outside the buckets.
    sample = jax.jit(lambda lg, t, k: _sample(lg, t, jax.random.wrap_key_data(k)))
    key = np.zeros((2,), np.uint32)
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    for tokens in TOKEN_BUCKETS:
        ids = np.zeros((tokens,), np.int32)
        positions = np.arange(tokens, dtype=np.float32)
        calls.append((backbone, (params, ids, positions)))
        # tpu-inference `_precompile_select_from_array`: every token bucket x request bucket.
        for reqs in REQUEST_BUCKETS:
            hidden_t = np.zeros((tokens, WIDTH), np.float32)
            calls.append((select, (hidden_t, np.zeros((reqs,), np.int32))))
    hidden = np.zeros((TOKEN_BUCKETS[-1], WIDTH), np.float32)
    for reqs in REQUEST_BUCKETS:
        calls.append((logits, (params, hidden, np.zeros((reqs,), np.int32))))
        calls.append(
            (sample, (np.zeros((reqs, VOCAB), np.float32), np.ones((reqs,), np.float32), key))
        )
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--workload", choices=("small", "transformer"), required=True)
    parser.add_argument("--functions", type=int, default=12, help="small: how many")
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS, help="transformer: blocks")
    args = parser.parse_args()
    counts = dict.fromkeys(EVENTS.values(), 0)

    def listen(event: str, **_: Any) -> None:
        if event in EVENTS:
            counts[EVENTS[event]] += 1

    spent = dict.fromkeys(DURATIONS.values(), 0.0)
    each: list[float] = []

    def timed(event: str, duration_secs: float, **_: str | int) -> None:
        if event in DURATIONS:
            spent[DURATIONS[event]] += duration_secs
        if DURATIONS.get(event) == "compile_seconds":
            each.append(round(duration_secs, 3))

    monitoring.register_event_listener(listen)
    monitoring.register_event_duration_secs_listener(timed)
    jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
    # tpu-inference's own step: the directory from VLLM_XLA_CACHE_PATH, nothing else.
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)  # type: ignore[no-untyped-call]
    calls = small(args.functions) if args.workload == "small" else transformer(args.layers)
    for function, call_args in calls:
        jax.block_until_ready(function(*call_args))  # type: ignore[no-untyped-call]
    seconds = time.monotonic() - STARTED
    entries = (
        sorted(n for n in os.listdir(args.cache_dir) if n.endswith("-cache"))
        if os.path.isdir(args.cache_dir)
        else []
    )
    threshold = jax.config.values["jax_persistent_cache_min_compile_time_secs"]
    print(
        json.dumps(
            {
                **counts,
                **{k: round(v, 3) for k, v in spent.items()},
                "entries": len(entries),
                "seconds": round(seconds, 3),
                "threshold": threshold,
                "import_seconds": round(IMPORTED - STARTED, 3),
                "each_compile_seconds": each,
            }
        )
    )


if __name__ == "__main__":
    main()
