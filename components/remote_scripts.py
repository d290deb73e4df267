"""What the node-side scripts of both backends (scripts/remote/) agree on: the templates, the
secret files' names, the node tool's parts, how long one readiness answer may take."""

from __future__ import annotations

import re
from pathlib import Path

REMOTE = Path(__file__).resolve().parent.parent / "scripts" / "remote"
HEADER = "set -euo pipefail\n"
HF_TOKEN_FILE = "hf_token"  # noqa: S105 - a file name
API_KEY_FILE = "vllm_api_key"
#: The node tool (scripts/remote/xla_cache.py) and its parts, written side by side on the node.
XLA_CACHE_MODULES = (
    "xla_cache.py",
    "xla_cache_base.py",
    "xla_cache_pool.py",
    "xla_cache_retry.py",
    "xla_cache_resumable.py",
    "xla_cache_api.py",
    "xla_cache_gcloud.py",
    "xla_cache_restore.py",
    "xla_cache_save.py",
    "xla_cache_watch.py",
)
#: How long each of the model's answers to the readiness check may take (a warm server takes
#: about a second): a build that hangs fails instead of being called ready.
READINESS_ANSWER_SECONDS = 120


def version_of(resource: str | None) -> str:
    """`projects/P/secrets/S/versions/N` -> `N`; `latest` when not known (yet)."""
    match = re.fullmatch(r"projects/[^/]+/secrets/[^/]+/versions/([^/]+)", resource or "")
    return match.group(1) if match else "latest"
