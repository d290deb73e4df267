"""The per-backend part of the stack outputs: what each backend's builder hands `__main__.py`.

Both backends fill every field, so `__main__.py` exports one contract whichever backend ran
(README "Outputs", tests/test_output_contract.py). A field that means nothing for a backend
gets its documented empty value, never None: the Pulumi engine drops None outputs, and a
consumer's `require_output` would then fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass
class BackendOutputs:
    endpoint: pulumi.Input[str]
    openai_base_url: pulumi.Input[str]
    api_key: pulumi.Input[str]
    api_key_secret: pulumi.Input[str]
    zone: pulumi.Input[str]
    queued_resource: pulumi.Input[str]
    node: pulumi.Input[str]
    external_ip: pulumi.Input[str | None]
    internal_ip: pulumi.Input[str | None]
    expires_at: pulumi.Input[str | None]
    ssh_command: pulumi.Input[str]
    ssh_private_key: pulumi.Input[str]
    ssh_host_key: pulumi.Input[str | None]
    hbm: pulumi.Input[dict[str, float] | None]
    startup_seconds: pulumi.Input[float | None]
    #: Serving replicas: 1 on the VM backend, `gke.replicas` on GKE.
    replicas: pulumi.Input[int]
    #: The GKE cluster's `projects/P/locations/L/clusters/N`; "" on the VM backend.
    cluster: pulumi.Input[str]
    #: Whether the start was warm (components/compile_cache.py `cache_result`), never None.
    cache_restored: pulumi.Input[dict[str, Any]]
