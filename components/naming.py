"""How the program names what it creates in GCP: ids derived from the stack, and its labels,
so the console or a billing report shows which stack made what."""

from __future__ import annotations

import hashlib
import re

PROGRAM = "tpu-vllm"


def resource_id(stack: str, suffix: str = "") -> str:
    """A GCP-safe id (`[a-z][-a-z0-9]*`, at most 30 chars) derived from the stack name."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{PROGRAM}-{stack}".lower()).strip("-")
    text = f"{base}{suffix}"
    return text[:30].rstrip("-")


def distinct_id(stack: str) -> str:
    """`resource_id(stack)`, or, when truncating it dropped part of the name, its head and 6
    hex of the name's hash: two long stack names sharing a scrape `job` would mix their series."""
    full = re.sub(r"[^a-z0-9-]+", "-", f"{PROGRAM}-{stack}".lower()).strip("-")
    short = resource_id(stack)
    if short == full:
        return short
    digest = hashlib.sha256(stack.encode()).hexdigest()[:6]
    return f"{short[: 30 - len(digest) - 1].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """`text` as a Cloud Monitoring label key or value."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def stack_labels(stack: str) -> dict[str, str]:
    """`labels` for a component that is given the stack's name alone."""
    return {
        "stack": resource_id(stack)[len(PROGRAM) + 1 :] or "default",
        "project": PROGRAM,
        "managed-by": "pulumi",
    }
