"""The GKE backend's Kubernetes objects, as plain manifests (dicts) built from the stack config.

Pure functions, so the tests validate against Kubernetes' schemas offline the very dicts Pulumi
sends (k8s_workload.py). The server runs the VM path's image, entrypoint and `vllm serve` flags;
shapes follow GoogleCloudPlatform/accelerated-platforms `online-inference-tpu/vllm`, except its
`strategy: Recreate` (see `deployment`). Why each object looks as it does: docs/gke.md "What it
creates".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import catalog, jax_cache_env, remote_scripts
from components.config import WorkloadSections
from components.gke import compute_class, pod_resources, pod_security, server_probes
from components.naming import resource_id

APP = "tpu-vllm"
#: The Kubernetes service account the pods run as, bound to the stack's GSA.
KSA = "vllm"
DEPLOYMENT = "vllm"
SERVICE = "vllm"
DISRUPTION_BUDGET = "vllm"
SCRIPTS_CONFIG_MAP = "tpu-vllm-scripts"
SERVER_SECRETS = "vllm-secrets"
PROBE_SECRETS = "vllm-api-key"
CONTAINER = "vllm"
#: GKE docs "Use Secret Manager add-on with GKE".
SECRETS_DRIVER = "secrets-store-gke.csi.k8s.io"
SECRETS_PROVIDER = "gke"
SPC_API_VERSION = "secrets-store.csi.x-k8s.io/v1"
SCRIPTS_DIR = "/tpu-vllm"
ENTRYPOINT = f"{SCRIPTS_DIR}/entrypoint.sh"
#: Not the VM path's `/run/secrets`, which would sit above the service-account token's mount:
#: the container would never start (docs/gke.md "What it creates").
SECRETS_DIR = "/etc/tpu-vllm/secrets"
VLLM_CACHE_DIR = "/root/.cache/vllm"
SHM_DIR = "/dev/shm"  # noqa: S108 - the VM path's HF_HOME, in memory
#: A stopping server keeps answering while the Service drops it: vLLM stops at once on SIGTERM.
DRAIN_SECONDS = 10
#: The drain, then vLLM's shutdown (and the cache sidecar's last save).
TERMINATION_GRACE_SECONDS = DRAIN_SECONDS + 30
MAX_SURGE = 1
ROLLING_UPDATE = {
    "type": "RollingUpdate",
    "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": 0},
}
#: Else pulumi-kubernetes waits for every replica: N flex-start nodes at once on a create.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


def namespace_name(stack: str) -> str:
    """One namespace per stack, so stacks can share a cluster (`gke.cluster`)."""
    return resource_id(stack)


def labels(config: WorkloadSections) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": resource_id(config.stack),
        "app.kubernetes.io/managed-by": "pulumi",
    }


def selector(config: WorkloadSections) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": resource_id(config.stack),
        "app.kubernetes.io/component": "server",
    }


def object_meta(
    name: str, namespace: str, config: WorkloadSections, **extra: Any
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels(config), **extra}


def namespace(config: WorkloadSections) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(config.stack),
            "labels": {**labels(config), **pod_security.namespace_labels()},
        },
    }


def service_account(config: WorkloadSections, gsa_email: pulumi.Input[str]) -> dict[str, Any]:
    """Bound to the stack's GSA: GKE's Workload Identity reads this annotation."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(
            KSA,
            namespace_name(config.stack),
            config,
            annotations={"iam.gke.io/gcp-service-account": gsa_email},
        ),
    }


def ksa_role_binding(config: WorkloadSections, role: str) -> dict[str, Any]:
    """Binds the Role `role` to the pods' KSA; the binding has its name."""
    ns = namespace_name(config.stack)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(role, ns, config),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": KSA, "namespace": ns}],
    }


def script_files() -> dict[str, str]:
    """From scripts/remote: the VM path's files where shared."""
    return {
        "entrypoint.sh": remote_scripts.REMOTE.joinpath("vllm_entrypoint.sh").read_text(),
        "wait_ready.sh": remote_scripts.HEADER
        + remote_scripts.REMOTE.joinpath("gke_wait_ready.sh").read_text(),
        "wait_ready.py": remote_scripts.REMOTE.joinpath("wait_ready.py").read_text(),
    }


def scripts_digest(files: Mapping[str, str]) -> str:
    return digest(sorted(files.items()))


def scripts_config_map_name(files_digest: str) -> str:
    """Named after its content: the kubelet refreshes a mounted ConfigMap in place, which would
    hand the old replicas, still serving during a rolling update, the new scripts."""
    return f"{SCRIPTS_CONFIG_MAP}-{files_digest[:10]}"


def scripts_config_map(config: WorkloadSections, files: Mapping[str, str]) -> dict[str, Any]:
    name = scripts_config_map_name(scripts_digest(files))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(name, namespace_name(config.stack), config),
        "data": dict(files),
    }


def digest(value: Any) -> str:
    """A short, stable hash, for pod annotations that roll the pods when what they name changes."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class MountedSecret:
    """One Secret Manager version the add-on mounts as SECRETS_DIR/file."""

    file: str
    project: str
    secret: str
    version: pulumi.Input[str]


def secret_provider_class(
    config: WorkloadSections, name: str, secrets: Sequence[MountedSecret]
) -> dict[str, Any]:
    """Resource names only: the add-on fetches the values on the node, as the pod."""
    entries = pulumi.Output.all(*(s.version for s in secrets)).apply(
        lambda versions: "".join(
            f'- resourceName: "projects/{s.project}/secrets/{s.secret}/versions/{v}"\n'
            f'  path: "{s.file}"\n'
            for s, v in zip(secrets, versions, strict=True)
        )
    )
    return {
        "apiVersion": SPC_API_VERSION,
        "kind": "SecretProviderClass",
        "metadata": object_meta(name, namespace_name(config.stack), config),
        "spec": {"provider": SECRETS_PROVIDER, "parameters": {"secrets": entries}},
    }


def secrets_volume(name: str, provider_class: str) -> dict[str, Any]:
    return {
        "name": name,
        "csi": {
            "driver": SECRETS_DRIVER,
            "readOnly": True,
            "volumeAttributes": {"secretProviderClass": provider_class},
        },
    }


def node_selector(config: WorkloadSections) -> dict[str, str]:
    """The class alone, whose rule names the slice; no TPU node labels (docs/gke.md)."""
    return compute_class.node_selector(config)


TPU_TOLERATION = {
    "key": catalog.GKE_TPU_RESOURCE,
    "operator": "Exists",
    "effect": "NoSchedule",
}


def server_command(config: WorkloadSections) -> tuple[list[str], list[str]]:
    """(command, args)."""
    return [ENTRYPOINT], ["vllm", "serve", config.model.id, *config.vllm.serve_args()]


@dataclass(frozen=True)
class PodExtras:
    """What the compile cache adds to the server pod."""

    init_containers: tuple[dict[str, Any], ...] = ()
    sidecars: tuple[dict[str, Any], ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


def deployment(
    config: WorkloadSections,
    *,
    image: pulumi.Input[str],
    api_key_version: pulumi.Input[str],
    files_digest: str,
    extras: PodExtras | None = None,
    owner_references: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """N replicas, one TPU node each. A new pod template rolls in one replica at a time, the
    old build serving until the new one has answered: the price is a spare TPU node per update
    (docs/gke.md "Updates")."""
    extras = extras or PodExtras()
    command, args = server_command(config)
    container = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "args": args,
        "env": [
            {"name": "HF_HOME", "value": SHM_DIR},
            {
                "name": "HF_TOKEN_PATH",
                "value": f"{SECRETS_DIR}/{remote_scripts.HF_TOKEN_FILE}",
            },
            {
                "name": "VLLM_API_KEY_FILE",
                "value": f"{SECRETS_DIR}/{remote_scripts.API_KEY_FILE}",
            },
            *({"name": k, "value": v} for k, v in jax_cache_env.container_env(config).items()),
        ],
        "ports": [{"name": "http", "containerPort": config.vllm.port, "protocol": "TCP"}],
        "resources": pod_resources.server_resources(config.tpu.chip, config.model),
        "securityContext": dict(pod_security.SERVER_CONTAINER),
        **server_probes.probes(config, SECRETS_DIR, SCRIPTS_DIR),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(DRAIN_SECONDS)]}}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": SHM_DIR},
            {"name": "vllm-cache", "mountPath": VLLM_CACHE_DIR},
            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
        ],
    }
    annotations: dict[str, Any] = {
        "tpu-vllm/api-key-version": api_key_version,
        "tpu-vllm/scripts": files_digest,
        **extras.annotations,
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": KSA,
        "nodeSelector": node_selector(config),
        "tolerations": [TPU_TOLERATION, compute_class.toleration(config)],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": dict(pod_security.POD),
        "containers": [container, *extras.sidecars],
        "volumes": [
            pod_resources.shm_volume(config, "dshm"),
            {"name": "vllm-cache", "emptyDir": {}},
            secrets_volume("secrets", SERVER_SECRETS),
            {
                "name": "scripts",
                "configMap": {
                    "name": scripts_config_map_name(files_digest),
                    "defaultMode": 0o555,
                },
            },
            *extras.volumes,
        ],
    }
    if extras.init_containers:
        pod_spec["initContainers"] = list(extras.init_containers)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(
            DEPLOYMENT,
            namespace_name(config.stack),
            config,
            annotations=dict(SKIP_AWAIT),
            **({"ownerReferences": list(owner_references)} if owner_references else {}),
        ),
        "spec": {
            "replicas": config.replicas,
            "strategy": ROLLING_UPDATE,
            "selector": {"matchLabels": selector(config)},
            "template": {
                "metadata": {"labels": selector(config), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def pod_disruption_budget(config: WorkloadSections) -> dict[str, Any]:
    """One replica keeps serving while a node is drained (docs/gke.md "Node recycling");
    an unready pod serves nobody and may always go."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(DISRUPTION_BUDGET, namespace_name(config.stack), config),
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": selector(config)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


#: The backend-service-based passthrough Network Load Balancer, GKE's choice for new Services.
L4_RBS = {"cloud.google.com/l4-rbs": "enabled"}
#: By NAME, from the Address resource's output: a name not found gives an ephemeral IP silently.
STATIC_ADDRESSES_ANNOTATION = "networking.gke.io/load-balancer-ip-addresses"


def service(config: WorkloadSections, address_name: pulumi.Input[str]) -> dict[str, Any]:
    """The one stable address, open only to `access.allowedCidrs`."""
    annotations: dict[str, Any] = {
        **L4_RBS,
        STATIC_ADDRESSES_ANNOTATION: address_name,
        # Its await fails on any not-ready endpoint, i.e. every recycle (docs/gke.md "Readiness").
        **SKIP_AWAIT,
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(
            SERVICE, namespace_name(config.stack), config, annotations=annotations
        ),
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerSourceRanges": list(config.access.allowed_cidrs),
            "selector": selector(config),
            "ports": [
                {"name": "http", "port": config.vllm.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }
