"""Progress lines from the GKE backend's dynamic providers, for waits that take minutes.

In the dynamic provider host `pulumi.log` has no engine and prints to stderr itself
(pulumi/log.py); the engine shows a plugin's stderr in the CLI (sdk/go/common/resource/plugin/
plugin.go `runtrace`), so a plain stderr line is what reaches the operator.
"""

from __future__ import annotations

import sys


def report(message: str) -> None:
    print(f"tpu-vllm: {message}", file=sys.stderr, flush=True)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
