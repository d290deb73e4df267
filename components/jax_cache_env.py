"""The environment the server container's JAX reads for its persistent compile cache.

Why: JAX writes a persistent-cache entry only for a compile that took at least
`jax_persistent_cache_min_compile_time_secs` (default 1.0 s). The check is in
`jax/_src/compiler.py` `_cache_write` (`if compile_time_secs < min_compile_time: return`); the
option and its environment name are in `jax/_src/config.py`: `float_state` reads
`os.getenv(name.upper())` once, at `import jax`, and parses it with `float()`. So every
sub-second compile is redone on every start, restored cache or not: seed 000's same-VM warm start
still takes 497 s of its 857 s. With the threshold at 0 (`cache.minCompileSeconds`, default 0)
every compile is written, and a restored node finds every program it compiles.

Who else sets it (read in vllm-project/tpu-inference `tpu_inference/runner/compilation_manager.py`,
`CompilationManager.__init__`, the only `jax.config.update` of a persistent-cache option in
`tpu_inference/`): it points `jax_compilation_cache_dir` at `VLLM_XLA_CACHE_PATH` unless
`VLLM_DISABLE_COMPILE_CACHE`, and only under `VLLM_XLA_CHECK_RECOMPILATION` sets the threshold
(and `jax_persistent_cache_min_entry_size_bytes`) to -1, i.e. "cache everything" too. So the
environment set here is what JAX uses; nothing in the serving stack raises it again.

Not set, on purpose:
- `JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES`: default 0 means "let JAX pick", and
  `jax/_src/compilation_cache.py` `_initialize_cache` then sets it to
  `default_min_cache_entry_size()`, which returns 0 in open-source JAX: no size floor, the same
  as -1. Nothing to change.
- `JAX_COMPILATION_CACHE_DIR`: tpu-inference sets the directory itself from
  `VLLM_XLA_CACHE_PATH` (default `~/.cache/vllm/xla_cache`, i.e. `/root/.cache/vllm/xla_cache`
  in the container, which is what the VM and GKE paths restore into). With jax < 0.11.0 the key
  of every entry contains this absolute path (`compiler.py` puts
  `xla_gpu_per_fusion_autotune_cache_dir` under it in the debug options that
  `jax/_src/cache_key.py` hashes), so a copy under another path never hits. jax 0.11.0, which
  tpu-inference pins (requirements.txt), clears that option in `cache_key.py` (jax-ml/jax
  ad707df0f9), so the image's JAX no longer puts the path in the key; the path stays fixed all
  the same, as cheap insurance for an older image and because it is tpu-inference's default.
- `JAX_COMPILATION_CACHE_MAX_SIZE`: default -1, no eviction, so JAX writes no `-atime` stamps.

The threshold is not in JAX's cache key (`cache_key.py` hashes the program, versions, XLA flags,
compile options and topology), so changing it keeps the stored cache usable: it only changes
which new compiles are written.
"""

from __future__ import annotations

from components.config import ServerSections

#: `jax_persistent_cache_min_compile_time_secs` as JAX reads it from the environment.
MIN_COMPILE_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def seconds_text(seconds: float) -> str:
    """A number as `float()` reads it back exactly: `0`, `1`, `0.25`."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def container_env(config: ServerSections) -> dict[str, str]:
    """{name: value} for the server container on both backends (VM `docker run -e`, GKE env).

    Rendered whether or not the bucket cache is enabled: the same VM's `~/.cache/vllm` mount
    keeps entries across container restarts either way.
    """
    return {MIN_COMPILE_TIME_ENV: seconds_text(config.cache.min_compile_seconds)}
