"""The pods' security contexts, and the Pod Security level their namespace declares.

Why: clusters enforce Pod Security Standards per namespace (`pod-security.kubernetes.io/
enforce`, Kubernetes docs "Pod Security Admission"), and a refused pod is never made: its
ReplicaSet only records FailedCreate, and `pulumi up` would wait out the readiness deadline.

- The readiness Job meets "restricted": a numeric non-root user, no privilege escalation, no
  capabilities, the runtime's default seccomp profile, a read-only root with its own /tmp.
  The Secret Manager add-on writes the key file 0644 (kubernetes-sigs/secrets-store-csi-driver
  `pkg/secrets-store/nodeserver.go`, `permission`), so any user reads it.
- The server and the cache containers meet "baseline" and two parts of "restricted": no
  privilege escalation (vLLM runs no setuid program) and RuntimeDefault seccomp (GKE Autopilot
  applies the containerd default profile to all workloads, GKE docs "About seccomp in GKE", and
  Autopilot runs TPU workloads; on Standard it is this stack's choice, not yet run on a TPU
  node). Not "restricted": the vLLM TPU image runs as root (its
  paths, `/root/.cache/vllm` among them, are root's) and libtpu under another user, or with
  every capability dropped, is not verified anywhere. So the namespace the stack creates says
  `enforce: baseline`, which keeps a cluster-wide "restricted" default from refusing the pods,
  and components/gke/pod_admission.py refuses at `pulumi up`, before the Deployment changes,
  when the namespace has been set to enforce more.
"""

from __future__ import annotations

from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
#: The level the server's pods meet.
LEVEL = "baseline"
#: Any numeric user: the readiness script needs no home and writes only to its own /tmp.
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


def with_server_context(container: dict[str, Any]) -> dict[str, Any]:
    """`container` (the server or a cache container) with the server's security context."""
    return {**container, "securityContext": dict(SERVER_CONTAINER)}
