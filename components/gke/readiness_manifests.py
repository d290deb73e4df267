"""The readiness Job `pulumi up` waits on, and its right to read the server's rollout.

pulumi-kubernetes waits for a Job to complete, so this Job is the GKE backend's "ready"
(components/gke/k8s_workload.py says why the Deployment and the Service are not awaited). Its
script, scripts/remote/gke_wait_ready.sh, passes in two steps:

1. The Deployment has rolled out the generation the Job was created for. On an update, a
   Service with no Ready endpoint still sends traffic to endpoints that are terminating but
   serving (kube-proxy's fallback: kubernetes/kubernetes `pkg/proxy/topology.go`,
   `CategorizeEndpoints`), so right after a `Recreate` update an old pod answers /v1/models as
   a new one will. The script reads the Deployment (`metadata.generation` at its first read)
   and waits, as `kubectl rollout status` does (kubernetes/kubectl
   `pkg/polymorphichelpers/rollout_status.go`, `DeploymentStatusViewer.Status`), for
   `status.observedGeneration` to reach it and `status.updatedReplicas` to reach
   `spec.replicas` with no old replica left, then for one Ready replica (not all: flex-start
   nodes come when they come). With `Recreate` the controller creates the new ReplicaSet's pods
   only once no old pod runs (kubernetes/kubernetes `pkg/controller/deployment/recreate.go`,
   `oldPodsRunning`: any pod not Succeeded or Failed counts), so from then on only new pods
   can answer.
2. One replica answers /health and /v1/models (with the API key) through the Service.

The Role grants `get` on the one Deployment, bound to the pods' KSA, which the Job runs as for
its API key's Workload Identity mount. Pure functions, beside components/gke/k8s_manifests.py.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi

from components import remote_scripts
from components.config import StackConfig
from components.gke.k8s_manifests import (
    DEPLOYMENT,
    KSA,
    PROBE_SECRETS,
    SCRIPTS_CONFIG_MAP,
    SCRIPTS_DIR,
    SECRETS_DIR,
    SERVICE,
    _meta,
    ksa_role_binding,
    labels,
    namespace_name,
    secrets_volume,
)
from scripts.remote import wait_ready

READINESS_JOB = "vllm-ready"
#: A small image with curl for the readiness Job (Alpine; /bin/sh is busybox ash).
PROBE_IMAGE = "curlimages/curl:8.11.1"
ROLLOUT_READER = "tpu-vllm-rollout-reader"


def readiness_deadline_seconds(config: StackConfig) -> int:
    """How long `pulumi up` waits for a Ready replica: a flex-start node must be found
    (`tpu.capacityWait`), then the server must start (`vllm.readinessTimeout`)."""
    return config.tpu.capacity_wait_seconds + config.vllm.readiness_timeout_seconds


def rollout_reader_role(config: StackConfig) -> dict[str, Any]:
    """`GET /apis/apps/v1/namespaces/NS/deployments/vllm`, its generation and status; nothing
    else (`resourceNames`)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ROLLOUT_READER, namespace_name(config.stack), config),
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": [DEPLOYMENT],
                "verbs": ["get"],
            }
        ],
    }


def rollout_reader_binding(config: StackConfig) -> dict[str, Any]:
    return ksa_role_binding(config, ROLLOUT_READER)


def question_env(config: StackConfig) -> list[dict[str, str]]:
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


def readiness_job(config: StackConfig, revision: pulumi.Input[str]) -> dict[str, Any]:
    """Completes once the Deployment has rolled out and one replica answers /health and
    /v1/models through the Service.

    `revision` names the server's pod template: a new one replaces the Job, which runs again.
    """
    ns = namespace_name(config.stack)
    deadline = readiness_deadline_seconds(config)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(
            READINESS_JOB,
            ns,
            config,
            # A Job that failed once is replaced on the next `pulumi up` instead of awaited.
            annotations={"pulumi.com/replaceUnready": "true"},
        ),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline + 60,
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
                            "volumeMounts": [
                                {"name": "api-key", "mountPath": SECRETS_DIR, "readOnly": True},
                                {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        secrets_volume("api-key", PROBE_SECRETS),
                        {"name": "scripts", "configMap": {"name": SCRIPTS_CONFIG_MAP}},
                    ],
                },
            },
        },
    }
