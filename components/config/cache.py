"""The `cache` section: the XLA compile cache in Cloud Storage (components/compile_cache.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from components.config.reader import Reader, as_bool, as_float, as_str, parse_positive_duration

DEFAULT_CACHE_RESTORE_TIMEOUT = "5m"  # a few GiB from a same-region bucket takes well under it.
#: On a VM, the bound on what a flex-start run's end loses (its deletion gives no moment for a
#: last save).
DEFAULT_CACHE_SAVE_INTERVAL = "5m"
# Cloud Storage bucket names: 3-63 of [a-z0-9_.-], starting and ending with a letter or digit.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class CacheSettings:
    """The XLA compile cache in Cloud Storage (components/compile_cache.py)."""

    enabled: bool = True
    #: An existing bucket to use; None means the stack creates its own.
    bucket: str | None = None
    #: Seconds the node may spend restoring; after that it starts cold.
    restore_timeout_seconds: int = 300
    #: `jax_persistent_cache_min_compile_time_secs` (components/jax_cache_env.py).
    min_compile_seconds: float = 0.0
    #: Seconds between the node's saves after the one at ready.
    save_interval_seconds: int = 300


def parse_cache(r: Reader) -> CacheSettings:
    enabled = r.get("enabled", as_bool, True, "true or false")
    bucket = r.get("bucket", as_str, None, "a Cloud Storage bucket name")
    if bucket is not None:
        bucket = bucket.removeprefix("gs://").rstrip("/")
        if not _BUCKET_RE.match(bucket) or ".." in bucket or bucket.startswith("goog"):
            r.fail(
                "bucket",
                bucket,
                "not a Cloud Storage bucket name. Fix: 3-63 lowercase letters, digits, "
                "'-', '_' and '.', e.g. my-project-xla-cache, or remove the key to let the "
                "stack create its own bucket",
            )
            bucket = None
    timeout = parse_positive_duration(r, "restoreTimeout", DEFAULT_CACHE_RESTORE_TIMEOUT)
    min_compile = _parse_min_compile_seconds(r)
    interval = parse_positive_duration(r, "saveInterval", DEFAULT_CACHE_SAVE_INTERVAL)
    return CacheSettings(
        enabled=enabled,
        bucket=bucket,
        restore_timeout_seconds=timeout,
        min_compile_seconds=min_compile,
        save_interval_seconds=interval,
    )


def _parse_min_compile_seconds(r: Reader) -> float:
    """`cache.minCompileSeconds`: a finite number of seconds >= 0 (JAX reads it with float())."""
    what = "a number of seconds >= 0, e.g. 0 (cache every compile) or 1.0 (JAX's own default)"
    value = r.get("minCompileSeconds", as_float, None, what)
    if value is not None and not (math.isfinite(value) and value >= 0):
        r.fail(
            "minCompileSeconds",
            r.values.get("minCompileSeconds"),
            f"must be a finite number of seconds >= 0. Fix: {what}, or remove the key "
            "for the default 0",
        )
        return 0.0
    return 0.0 if value is None else value
