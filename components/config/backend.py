"""`tpu-vllm:backend`: where the server runs, `vm` (the default) or `gke`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from components.config.keys import NAMESPACE
from components.messages import closest, show

Backend = Literal["vm", "gke"]
#: `tpu-vllm:backend`: where the server runs. `vm` is one TPU VM from a queued resource;
#: `gke` is N flex-start TPU nodes in a GKE cluster behind one load-balancer address.
BACKENDS: tuple[Backend, ...] = ("vm", "gke")
DEFAULT_BACKEND: Backend = "vm"
# Words people use for a backend, mapped to ours for the "did you mean" hint.
BACKEND_ALIASES: Mapping[str, Backend] = {
    "kubernetes": "gke",
    "k8s": "gke",
    "gcp-gke": "gke",
    "tpu-vm": "vm",
    "tpuvm": "vm",
    "tpu": "vm",
    "queued-resource": "vm",
}


def parse_backend(raw: Any, problems: list[str]) -> Backend | None:
    """`tpu-vllm:backend`: `vm` (the default) or `gke`; anything else names the closest one."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return DEFAULT_BACKEND
    text = raw.strip().lower() if isinstance(raw, str) else ""
    for backend in BACKENDS:
        if text == backend:
            return backend
    close = BACKEND_ALIASES.get(text) or closest(text, BACKENDS)
    listing = " | ".join(BACKENDS)
    fix = (
        f"Fix: did you mean `{close}`? Valid: {listing}"
        if close
        else f"Fix: one of {listing} (`pulumi config set {NAMESPACE}:backend gke`)"
    )
    problems.append(f"{NAMESPACE}:backend = {show(raw)}: unknown backend. {fix}")
    return None
