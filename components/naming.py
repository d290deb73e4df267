"""How the program names what it creates in GCP: ids derived from the stack, and its labels.

Shared by both backends and the shared components (secrets, compile cache): a TPU VM's queued
resource, a GKE cluster and a Secret Manager secret of one stack carry the same id stem, so a
reader of the console or a billing report can tell which stack made what.
"""

from __future__ import annotations

import re

from components.config import StackConfig

PROGRAM = "tpu-vllm"


def resource_id(stack: str, suffix: str = "") -> str:
    """A GCP-safe id (`[a-z][-a-z0-9]*`, at most 30 chars) derived from the stack name."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{PROGRAM}-{stack}".lower()).strip("-")
    text = f"{base}{suffix}"
    return text[:30].rstrip("-")


def labels(config: StackConfig) -> dict[str, str]:
    """Labels that say who made a TPU and for which stack, for billing reports and cleanup."""
    return {
        "stack": resource_id(config.stack)[len(PROGRAM) + 1 :] or "default",
        "project": PROGRAM,
        "managed-by": "pulumi",
    }
