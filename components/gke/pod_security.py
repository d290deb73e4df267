"""The pods' security contexts, and the Pod Security level their namespace declares.

A namespace that enforces more than the pods meet refuses them silently (a FailedCreate event).
The readiness Job meets "restricted"; the server, which the vLLM TPU image runs as root, meets
"baseline", which the namespace declares. Why: docs/gke.md "What the pods need of a node and a
namespace".
"""

from __future__ import annotations

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVEL = "baseline"
#: Any numeric user: the script needs no home and writes only to its own /tmp.
READINESS_USER = 65532

POD = {"seccompProfile": {"type": "RuntimeDefault"}}
SERVER_CONTAINER = {"allowPrivilegeEscalation": False}
READINESS_POD = {
    "runAsNonRoot": True,
    "runAsUser": READINESS_USER,
    "runAsGroup": READINESS_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
READINESS_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def namespace_labels() -> dict[str, str]:
    return {ENFORCE_LABEL: LEVEL}
