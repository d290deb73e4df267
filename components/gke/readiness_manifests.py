"""The readiness Job `pulumi up` waits on, and its right to read the server's rollout.

pulumi-kubernetes waits for a Job to complete, so this Job is the GKE backend's "ready"
(components/gke/k8s_workload.py says why the Deployment and the Service are not awaited). Its
script, scripts/remote/gke_wait_ready.sh, passes in two steps:

1. The Deployment has rolled out the generation the Job was created for, as `kubectl rollout
   status` decides it (kubernetes/kubectl `pkg/polymorphichelpers/rollout_status.go`,
   `DeploymentStatusViewer.Status`): `status.observedGeneration` has reached the generation
   (`metadata.generation` at the Job's first read), `status.updatedReplicas` has reached
   `spec.replicas`, and no old replica is left; then one replica is Ready (not all: on a create
   the flex-start nodes come when they come). The Deployment rolls one replica at a time
   (components/gke/k8s_manifests.py `deployment`, maxSurge 1, maxUnavailable 0): the controller
   scales the old ReplicaSet down only as new pods become available (kubernetes
   `pkg/controller/deployment/rolling.go`), and a pod is Ready only once its startup probe has
   asked the model. So on an update "no old replica left" means every new replica answered,
   and until then the old ones serve through the Service. From then on only new pods answer.
2. One replica answers /health, /v1/models (with the API key) and the model's two questions
   through the Service.

How long that may take (`readiness_deadline_seconds`): a first node, then each replica's turn
(the old pod's stop, the new one's image pull, cache restore and start) one after the other, as
an update goes.

The Role grants `get` on the one Deployment, bound to the pods' KSA, which the Job runs as for
its API key's Workload Identity mount. Pure functions, beside components/gke/k8s_manifests.py.
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
#: A small image with curl for the readiness Job (Alpine; /bin/sh is busybox ash).
PROBE_IMAGE = "curlimages/curl:8.11.1"
#: The label GKE puts on every TPU node (GKE docs "Plan TPUs in GKE": the node selector
#: `cloud.google.com/gke-tpu-accelerator`); the Job prefers nodes without it.
TPU_NODE_LABEL = "cloud.google.com/gke-tpu-accelerator"
ROLLOUT_READER = "tpu-vllm-rollout-reader"
#: scripts/remote/gke_wait_ready.sh's scratch directory (its TMPDIR default).
SCRATCH_DIR = "/tmp"  # noqa: S108 - the pod's own emptyDir


#: What a replica needs beyond its own start, as an update replaces it: the old pod's
#: termination grace (drain and shutdown), the new image's pull on the node it frees (that node
#: holds only the old digest) and the compile cache's restore in the init container.
IMAGE_PULL_SECONDS = 600


def replica_turn_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    """One replica's turn in a rolling update: the old pod stops, the new one pulls, restores
    the cache (`cache.restoreTimeout`; 0 without the cache) and starts (`vllm.readinessTimeout`
    from container start, which the startup probe allows)."""
    return (
        k8s_manifests.TERMINATION_GRACE_SECONDS
        + IMAGE_PULL_SECONDS
        + cache_restore_seconds
        + config.vllm.readiness_timeout_seconds
    )


def readiness_deadline_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    """How long the Job waits for the rollout and a Ready replica: a first flex-start node
    (`tpu.capacityWait`, the update's spare node or a create's first), then each replica's
    turn, one at a time as a rolling update replaces them, each new pod on the node its old
    one freed. A create passes on its first Ready replica."""
    turn = replica_turn_seconds(config, cache_restore_seconds)
    return config.tpu.capacity_wait_seconds + config.replicas * turn


def answers_seconds(config: WorkloadSections) -> int:
    """The model's answers to the Job after the deadline's wait: one bound per question."""
    questions = 2 if config.vllm.tool_call_parser else 1
    return questions * remote_scripts.READINESS_ANSWER_SECONDS


def job_seconds(config: WorkloadSections, cache_restore_seconds: int) -> int:
    """The most the Job's script runs: the deadline, then the answers."""
    return readiness_deadline_seconds(config, cache_restore_seconds) + answers_seconds(config)


def rollout_reader_role(config: WorkloadSections) -> dict[str, Any]:
    """`GET /apis/apps/v1/namespaces/NS/deployments/vllm`, its generation and status; nothing
    else (`resourceNames`)."""
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
    """The VM's two readiness questions (scripts/remote/wait_ready.py `question_bodies`), as
    the Job's env: the chat always, the tool call only when the server has a tool-call parser
    (`TOOL_BODY` empty otherwise), and how long each answer may take. No secret: the key is
    read from its file by the script."""
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
    """Completes once the Deployment has rolled out and one replica answers /health,
    /v1/models and the model's questions through the Service.

    `revision` names the server's pod template: a new one replaces the Job, which runs again.
    """
    ns = namespace_name(config.stack)
    deadline = readiness_deadline_seconds(config, cache_restore_seconds)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(
            READINESS_JOB,
            ns,
            config,
            # A Job that failed once is replaced on the next `pulumi up` instead of awaited.
            annotations={"pulumi.com/replaceUnready": "true"},
        ),
        "spec": {
            "backoffLimit": 0,
            # A disruption is not a failure: on a TPU node the Job's pod may be evicted (the
            # cluster autoscaler removing an emptied node, a flex-start node's recycling,
            # memory pressure); the Job then makes a new pod instead of failing `up`. The
            # Job controller counts a pod with the `DisruptionTarget` condition against no
            # limit under `Ignore` (Kubernetes docs "Pod failure policy", GA in 1.31).
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
                    # Its token reads the Deployment's rollout (the Role above).
                    "automountServiceAccountToken": True,
                    "restartPolicy": "Never",
                    # Pod Security "restricted" (components/gke/pod_security.py).
                    "securityContext": dict(pod_security.READINESS_POD),
                    # Schedulable wherever the stack runs: on an existing cluster whose every
                    # pool is tainted, the only nodes sure to exist are the class's TPU nodes,
                    # which carry the `google.com/tpu` and class taints (the kube-scheduler's
                    # TaintToleration filter places a pod only where it tolerates every
                    # NoSchedule and NoExecute taint). It asks for no TPU and little else, so it
                    # may share a TPU node with a replica; an untainted node serves as well.
                    "tolerations": [TPU_TOLERATION, compute_class.toleration(config)],
                    # ... but an untainted node first: the TPU hosts are the servers'.
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
                                # The script's scratch files, under a read-only root.
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
