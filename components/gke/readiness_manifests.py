"""The readiness Job `pulumi up` waits on, and its right to read the server's rollout.

Its script (scripts/remote/gke_wait_ready.sh) passes once the Deployment has rolled out the
Job's generation, as `kubectl rollout status` decides it, and a replica answers the model's
questions through the Service. Its deadline allows a first node, then each replica's turn in
the rolling update. Why and sources: docs/gke.md "Readiness".
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi

from components import remote_scripts
from components.config import WorkloadSections
from components.gke import compute_class, k8s_manifests, pod_resources, pod_security
from components.gke.k8s_manifests import (
    DEPLOYMENT,
    KSA,
    PROBE_SECRETS,
    SCRIPTS_DIR,
    SECRETS_DIR,
    SERVICE,
    TPU_TOLERATION,
    ksa_role_binding,
    labels,
    namespace_name,
    object_meta,
    secrets_volume,
)
from scripts.remote import wait_ready

READINESS_JOB = "vllm-ready"
#: Alpine: /bin/sh is busybox ash.
PROBE_IMAGE = "curlimages/curl:8.11.1"
#: On every TPU node (GKE docs "Plan TPUs in GKE"); the Job prefers nodes without it.
TPU_NODE_LABEL = "cloud.google.com/gke-tpu-accelerator"
ROLLOUT_READER = "tpu-vllm-rollout-reader"
#: The script's TMPDIR default.
SCRATCH_DIR = "/tmp"  # noqa: S108 - the pod's own emptyDir


#: The new image's pull on the node the old pod frees, which holds only the old digest.
IMAGE_PULL_SECONDS = 600


def replica_turn_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    """One replica's turn in a rolling update: the old pod stops, the new one pulls, restores
    the cache (0 without it) and starts."""
    return (
        k8s_manifests.TERMINATION_GRACE_SECONDS
        + IMAGE_PULL_SECONDS
        + cache_restore_seconds
        + config.vllm.readiness_timeout_seconds
    )


def readiness_deadline_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    """A first flex-start node, then each replica's turn, one at a time."""
    turn = replica_turn_seconds(config, cache_restore_seconds)
    return config.tpu.capacity_wait_seconds + config.replicas * turn


def answers_seconds(config: WorkloadSections) -> int:
    """One bound per question."""
    questions = 2 if config.vllm.tool_call_parser else 1
    return questions * remote_scripts.READINESS_ANSWER_SECONDS


def job_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    return readiness_deadline_seconds(config, cache_restore_seconds) + answers_seconds(config)


def rollout_reader_role(config: WorkloadSections) -> dict[str, Any]:
    """`get` on the one Deployment, nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(ROLLOUT_READER, namespace_name(config.stack), config),
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": [DEPLOYMENT],
                "verbs": ["get"],
            }
        ],
    }


def rollout_reader_binding(config: WorkloadSections) -> dict[str, Any]:
    return ksa_role_binding(config, ROLLOUT_READER)


def question_env(config: WorkloadSections) -> list[dict[str, str]]:
    """The VM's readiness questions; no secret: the script reads the key from its file."""
    chat, tools = wait_ready.question_bodies(config.model.id)
    tool = json.dumps(tools, separators=(",", ":")) if config.vllm.tool_call_parser else ""
    return [
        {"name": "CHAT_BODY", "value": json.dumps(chat, separators=(",", ":"))},
        {"name": "TOOL_BODY", "value": tool},
        {"name": "ANSWER_SECONDS", "value": str(remote_scripts.READINESS_ANSWER_SECONDS)},
    ]


def readiness_job(
    config: WorkloadSections,
    revision: pulumi.Input[str],
    scripts_config_map: str,
    cache_restore_seconds: int,
) -> dict[str, Any]:
    """`revision` names the server's pod template: a new one replaces the Job."""
    ns = namespace_name(config.stack)
    deadline = readiness_deadline_seconds(config, cache_restore_seconds)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(
            READINESS_JOB,
            ns,
            config,
            annotations={"pulumi.com/replaceUnready": "true"},
        ),
        "spec": {
            "backoffLimit": 0,
            # An evicted pod is replaced, not a failure.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "activeDeadlineSeconds": job_seconds(config, cache_restore_seconds) + 60,
            "template": {
                "metadata": {
                    "labels": {**labels(config), "app.kubernetes.io/component": "readiness"},
                    "annotations": {"tpu-vllm/server-revision": revision},
                },
                "spec": {
                    "serviceAccountName": KSA,
                    "automountServiceAccountToken": True,
                    "restartPolicy": "Never",
                    "securityContext": dict(pod_security.READINESS_POD),
                    # Wherever the stack runs: a cluster's only nodes may be tainted TPU ones.
                    "tolerations": [TPU_TOLERATION, compute_class.toleration(config)],
                    # ... but an untainted node first.
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {"key": TPU_NODE_LABEL, "operator": "DoesNotExist"},
                                        ]
                                    },
                                },
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "wait-ready",
                            "image": PROBE_IMAGE,
                            "command": ["/bin/sh", f"{SCRIPTS_DIR}/wait_ready.sh"],
                            "env": [
                                {"name": "TARGET_HOST", "value": f"{SERVICE}.{ns}.svc"},
                                {"name": "TARGET_PORT", "value": str(config.vllm.port)},
                                {"name": "MODEL", "value": config.model.id},
                                *question_env(config),
                                {"name": "DEPLOYMENT", "value": DEPLOYMENT},
                                {"name": "DEADLINE_SECONDS", "value": str(deadline)},
                                {
                                    "name": "API_KEY_FILE",
                                    "value": f"{SECRETS_DIR}/{remote_scripts.API_KEY_FILE}",
                                },
                                {
                                    "name": "POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                            ],
                            "resources": copy.deepcopy(pod_resources.READINESS_CONTAINER),
                            "securityContext": dict(pod_security.READINESS_CONTAINER),
                            "volumeMounts": [
                                {"name": "api-key", "mountPath": SECRETS_DIR, "readOnly": True},
                                {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
                                {"name": "tmp", "mountPath": SCRATCH_DIR},
                            ],
                        }
                    ],
                    "volumes": [
                        secrets_volume("api-key", PROBE_SECRETS),
                        {"name": "scripts", "configMap": {"name": scripts_config_map}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
                    ],
                },
            },
        },
    }
