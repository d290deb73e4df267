"""The environment the server container's JAX reads for its persistent compile cache.

JAX writes an entry only for a compile that took `jax_persistent_cache_min_compile_time_secs`
(default 1.0 s), so every shorter one is redone on every start, restored cache or not. The
threshold goes to 0 here (`cache.minCompileSeconds`); nothing else is set, and nothing in the
serving stack raises it again. Sources: docs/compile-cache.md, "Every compile cached".
"""

from __future__ import annotations

from components.config import ServerSections

#: `jax_persistent_cache_min_compile_time_secs` as JAX reads it from the environment.
MIN_COMPILE_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def seconds_text(seconds: float) -> str:
    """A number as `float()` reads it back exactly: `0`, `1`, `0.25`."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def container_env(config: ServerSections) -> dict[str, str]:
    """{name: value} for the server container on both backends, with or without the bucket
    cache (the VM's `~/.cache/vllm` mount keeps entries across container restarts either way)."""
    return {MIN_COMPILE_TIME_ENV: seconds_text(config.cache.min_compile_seconds)}
