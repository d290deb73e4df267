"""The GKE backend's Kubernetes objects as the `v6e4-gke` program renders them under mocks, for
the tests that hand them to a real API server (tests/kube/) and the one that lists them
(tests/mocked/test_gke_manifests.py): the stack file and three variants that change what the objects
carry.
"""

from __future__ import annotations

from typing import Any

from components.engine_values import whole_numbers
from tests.support.pulumi_program import ProgramRun

STACK = "v6e4-gke"

VARIANTS: dict[str, dict[str, Any]] = {
    "stack-file": {},
    "spot-one-zone": {
        "tpu-vllm:tpu.provisioning": "spot",
        "tpu-vllm:tpu.maxRunDuration": None,
        "tpu-vllm:tpu.zones": ["us-east5-b"],
    },
    "cache-off": {"tpu-vllm:cache.enabled": False},
    "port-and-extra-args": {
        "tpu-vllm:vllm.port": 8080,
        "tpu-vllm:vllm.extraArgs": ["--disable-log-requests"],
        "tpu-vllm:gke.replicas": 5,
    },
}


#: The `v6e4-gke` stack moved to one v5e chip serving E2B (seed 000's model and flags).
V5E1_ON_GKE: dict[str, Any] = {
    "tpu-vllm:tpu.chip": "v5e-1",
    "tpu-vllm:tpu.zones": ["us-west4-a"],
    "tpu-vllm:model.id": "google/gemma-4-E2B-it",
    "tpu-vllm:vllm.tensorParallelSize": 1,
    "tpu-vllm:vllm.kvCacheDtype": "auto",
    "tpu-vllm:vllm.maxModelLen": 32768,
}

#: Numbers cross the Pulumi engine as floats (`2` -> `2.0`); the API gets integers.
plain = whole_numbers


def manifests(run: ProgramRun) -> list[dict[str, Any]]:
    found = [plain(r.inputs) for r in run.resources if r.type.startswith("kubernetes:")]
    assert found, "no Kubernetes objects registered"
    return found
