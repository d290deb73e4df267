"""Progress lines for the dynamic providers' long waits: plain stderr is what reaches the
operator from the provider host (docs/gke.md "How the program reads the cluster").
"""

from __future__ import annotations

import sys


def report(message: str) -> None:
    print(f"tpu-vllm: {message}", file=sys.stderr, flush=True)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
