"""The GKE backend's Kubernetes objects, as plain manifests (dicts) built from the stack config.

Pure functions, so the same dicts are what Pulumi sends (components/gke/k8s_workload.py) and
what the tests validate against the Kubernetes OpenAPI schema offline. Values that only exist after
`pulumi up` (the service account's email, the reserved address's name, the API key's version)
are passed in as Pulumi inputs and nested as they are.

What the server runs is the VM path's, from the same code: the image `vllm.image`, the
entrypoint scripts/remote/vllm_entrypoint.sh (mounted from a ConfigMap, reads the API key file
into VLLM_API_KEY), and `vllm serve MODEL` with `VllmSettings.serve_args()`. The differences are
GKE's: the TPU is a `google.com/tpu` resource on a node of the stack's own ComputeClass, the
secrets are files mounted by GKE's Secret Manager add-on (a SecretProviderClass read with the
pod's Workload Identity; no Kubernetes Secret holds them) in their own directory, and readiness
is probed over HTTP.

Shapes follow GoogleCloudPlatform/accelerated-platforms `online-inference-tpu/vllm`
(`base/deployment.yaml`: a `/health` readiness probe, `/dev/shm` as a memory emptyDir; its
`strategy: Recreate` is not followed: an image upgrade must not take the endpoint down, see
`deployment`; `v*-*/patch-resources.yaml`: `google.com/tpu` requests and limits;
`v*-*/patch-nodeselector.yaml`: the ComputeClass alone, here the stack's own), and the GKE docs
for the Secret Manager add-on (`provider: gke`, driver `secrets-store-gke.csi.k8s.io`).
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
#: The scripts' ConfigMap, named after its content (`scripts_config_map_name`).
SCRIPTS_CONFIG_MAP = "tpu-vllm-scripts"
SERVER_SECRETS = "vllm-secrets"
PROBE_SECRETS = "vllm-api-key"
CONTAINER = "vllm"
#: GKE's Secret Manager add-on (GKE docs "Use Secret Manager add-on with GKE").
SECRETS_DRIVER = "secrets-store-gke.csi.k8s.io"
SECRETS_PROVIDER = "gke"
SPC_API_VERSION = "secrets-store.csi.x-k8s.io/v1"
#: Where the container sees things: the same paths as the VM path's `docker run`, except the
#: secrets (below).
SCRIPTS_DIR = "/tpu-vllm"
ENTRYPOINT = f"{SCRIPTS_DIR}/entrypoint.sh"
#: Where the Secret Manager add-on mounts the HF token and the API key: a directory of its own,
#: not the VM path's `/run/secrets`. The kubelet mounts every pod's service-account token at
#: `/var/run/secrets/kubernetes.io/serviceaccount`, and `/var/run` is a symlink to `/run` in
#: Debian and Alpine images. containerd sorts a container's mounts by path depth before the
#: runtime mounts them (containerd `internal/cri/opts/spec_linux_opts.go`, `withMounts`: "Sort
#: mounts in number of parts"), so a read-only volume at `/run/secrets`, or at any directory
#: above the token's, is mounted first, and the token's mount point then cannot be created
#: ("mkdir .../run/secrets/kubernetes.io: read-only file system"): the container never starts
#: (kubernetes/kubernetes#65835, #72261). Not under SCRIPTS_DIR either, a read-only mount.
SECRETS_DIR = "/etc/tpu-vllm/secrets"
VLLM_CACHE_DIR = "/root/.cache/vllm"
SHM_DIR = "/dev/shm"  # noqa: S108 - the VM path's HF_HOME, in memory
#: Seconds a stopping server keeps answering before it is sent SIGTERM: the endpoint controller
#: and every kube-proxy take a moment to drop a deleted pod from the Service, and vLLM stops its
#: HTTP server at once on SIGTERM (vllm-project/vllm `vllm/entrypoints/launcher.py`,
#: `serve_http`'s signal handler), so without it requests routed meanwhile are refused.
DRAIN_SECONDS = 10
#: The grace the kubelet gives a stopping pod: the drain, then vLLM's shutdown (and the cache
#: sidecar's last save, which starts at SIGTERM with no drain).
TERMINATION_GRACE_SECONDS = DRAIN_SECONDS + 30
#: A new pod template replaces one replica at a time, on one spare node: the old replica goes
#: only once a new one is Ready, i.e. has answered (`startup_probe`). Node recycling does not go
#: through this (the PodDisruptionBudget governs drains).
MAX_SURGE = 1
ROLLING_UPDATE = {
    "type": "RollingUpdate",
    "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": 0},
}
#: `pulumi.com/skipAwait`: pulumi-kubernetes would otherwise wait for *every* replica of the
#: Deployment (its Available condition), i.e. for N flex-start nodes at once on a create.
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
            # The Pod Security level the pods meet (components/gke/pod_security.py).
            "labels": {**labels(config), **pod_security.namespace_labels()},
        },
    }


def service_account(config: WorkloadSections, gsa_email: pulumi.Input[str]) -> dict[str, Any]:
    """The KSA, bound to the stack's GSA: GKE's Workload Identity reads this annotation."""
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
    """Binds the Role named `role` (the binding has its name) to the pods' KSA, which the
    server pods and the readiness Job run as."""
    ns = namespace_name(config.stack)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(role, ns, config),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": KSA, "namespace": ns}],
    }


def script_files() -> dict[str, str]:
    """The scripts the pods run, from scripts/remote (the VM path's files where shared)."""
    return {
        "entrypoint.sh": remote_scripts.REMOTE.joinpath("vllm_entrypoint.sh").read_text(),
        "wait_ready.sh": remote_scripts.HEADER
        + remote_scripts.REMOTE.joinpath("gke_wait_ready.sh").read_text(),
        # The VM's readiness checks; the server container's startup probe runs its `probe`.
        "wait_ready.py": remote_scripts.REMOTE.joinpath("wait_ready.py").read_text(),
    }


def scripts_digest(files: Mapping[str, str]) -> str:
    return digest(sorted(files.items()))


def scripts_config_map_name(files_digest: str) -> str:
    """A new name for new scripts. The kubelet refreshes a mounted ConfigMap in place, so one
    ConfigMap edited by an update would hand the *old* replicas, still serving during a rolling
    update, the new scripts (and a restarted old container would run them). Named after its
    content, each pod template mounts the scripts it was made with; Pulumi creates the new one
    before the rollout and deletes the old one only at the end of the `up`."""
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
    """A short, stable hash: a pod annotation that rolls the pods when what it names changes."""
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
    """GKE's Secret Manager add-on: which versions to mount, and under which file names.

    It holds resource names only; the values are fetched by the add-on on the node, with the
    pod's Workload Identity, when the pod starts.
    """
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
    """The TPU node this replica needs: one of the stack's own ComputeClass, selected by the
    class alone. The class's `tpu` rule already names the slice (components/gke/compute_class.py),
    so its nodes are the right TPU; the reference this follows selects only
    `cloud.google.com/compute-class` (GoogleCloudPlatform/accelerated-platforms
    `online-inference-tpu/vllm/v6e-gemma-4-31b-it/patch-nodeselector.yaml`), and Google's notes
    advise against other hard node selectors beside a class (GoogleCloudPlatform/gke-mcp skill
    `gke-compute-class-creator`). No source says GKE accepts, or needs, the TPU node labels
    (`cloud.google.com/gke-tpu-accelerator`, `gke-tpu-topology`) there, so they are not set."""
    return compute_class.node_selector(config)


TPU_TOLERATION = {
    "key": catalog.GKE_TPU_RESOURCE,
    "operator": "Exists",
    "effect": "NoSchedule",
}


def server_command(config: WorkloadSections) -> tuple[list[str], list[str]]:
    """(command, args): the VM path's entrypoint, then `vllm serve MODEL` and its flags."""
    return [ENTRYPOINT], ["vllm", "serve", config.model.id, *config.vllm.serve_args()]


@dataclass(frozen=True)
class PodExtras:
    """Containers and volumes other components add to the server pod (the compile cache)."""

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
    """N replicas of the server, one TPU node each; a new pod template rolls in one replica at a
    time, the old build serving until the new one has answered.

    `owner_references`: what the Deployment hangs from (components/gke/pod_owner.py), so that
    `pulumi destroy` waits for its pods.

    The strategy (ROLLING_UPDATE: `maxSurge: 1`, `maxUnavailable: 0`) decides how a *new pod
    template* (a new image digest, a changed flag, a rotated API key) replaces the old pods.
    The deployment controller (kubernetes `pkg/controller/deployment/rolling.go`) first adds one
    pod of the new template; it scales the old ReplicaSet down only while more pods than
    `replicas` are available, i.e. once a new pod is Ready, and a pod is Ready only after its
    startup probe has asked the model (`probes`). So the endpoint never serves with fewer
    Ready replicas than before, and a build that cannot answer never replaces one that can: its
    pod stays unready and the old replicas keep serving. The price is one spare TPU node per
    update (capacity wait and bill; docs/gke.md "Updates"); `maxSurge: 0, maxUnavailable: 1`
    would serve with one replica fewer (with one replica, with none).

    Node recycling does not go through the strategy: a drained node's pod is evicted and its
    ReplicaSet makes a new one; the PodDisruptionBudget (`pod_disruption_budget`) keeps a
    replica serving then.
    """
    extras = extras or PodExtras()
    command, args = server_command(config)
    container = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "args": args,
        "env": [
            # The VM path's `-e HF_HOME=/dev/shm`: the weights download into memory.
            {"name": "HF_HOME", "value": SHM_DIR},
            {
                "name": "HF_TOKEN_PATH",
                "value": f"{SECRETS_DIR}/{remote_scripts.HF_TOKEN_FILE}",
            },
            {
                "name": "VLLM_API_KEY_FILE",
                "value": f"{SECRETS_DIR}/{remote_scripts.API_KEY_FILE}",
            },
            # The VM path's `-e` for JAX's cache threshold (components/jax_cache_env.py).
            *({"name": k, "value": v} for k, v in jax_cache_env.container_env(config).items()),
        ],
        "ports": [{"name": "http", "containerPort": config.vllm.port, "protocol": "TCP"}],
        # The chips, and CPU and memory sized from the node and the weights: Burstable, not
        # BestEffort (components/gke/pod_resources.py).
        "resources": pod_resources.server_resources(config.tpu.chip, config.model),
        "securityContext": dict(pod_security.SERVER_CONTAINER),
        **server_probes.probes(config, SECRETS_DIR, SCRIPTS_DIR),
        # Keep answering while the Service drops this pod (DRAIN_SECONDS), then stop.
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(DRAIN_SECONDS)]}}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": SHM_DIR},
            {"name": "vllm-cache", "mountPath": VLLM_CACHE_DIR},
            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
        ],
    }
    annotations: dict[str, Any] = {
        # A rotated API key is a new version: a new pod template mounts it.
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
            # Seed 000's `-v /dev/shm:/dev/shm --shm-size 10gb`, and HF_HOME, in memory.
            pod_resources.shm_volume(config, "dshm"),
            # The XLA compile cache (~/.cache/vllm): restored from GCS before the server starts.
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
    """At least one replica keeps serving while nodes are drained. Drains go through the
    eviction API, which honours this budget (GKE docs "About custom ComputeClasses": a migrated
    or consolidated node is drained respecting PodDisruptionBudgets). How GKE drains a node it
    recycles is not documented beyond the CRD field, and a VM that reaches its run limit ends
    whatever the budget says, so `renewal.lead` must leave time to move one replica before
    the end. A pod that is not Ready may always be evicted (`AlwaysAllow`): it serves nobody."""
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


#: GKE's backend-service-based external passthrough Network Load Balancer (ingress-gce
#: `pkg/l4/annotations/service.go`: RBSAnnotationKey = "cloud.google.com/l4-rbs", value
#: "enabled"), the one GKE recommends for new LoadBalancer Services.
L4_RBS = {"cloud.google.com/l4-rbs": "enabled"}
#: The reserved addresses, by NAME: ingress-gce `pkg/l4/annotations/l4_static_address.go`
#: (StaticL4AddressesAnnotationKey) reads comma-separated address names and looks each up with
#: `GetRegionAddress(name, cluster region)`; `pkg/l4/address/to_use.go` (`IPv4ToUse`; it was
#: `pkg/address/to_use.go`) prefers it to `spec.loadBalancerIP`, "old field, was deprecated"
#: (since Kubernetes 1.24). An address that is not found is skipped silently, and the load
#: balancer then takes an ephemeral IP: so the name comes from the Address resource (an
#: output), which orders the Service after it.
STATIC_ADDRESSES_ANNOTATION = "networking.gke.io/load-balancer-ip-addresses"


def service(config: WorkloadSections, address_name: pulumi.Input[str]) -> dict[str, Any]:
    """The one stable address: a backend-service-based passthrough Network Load Balancer on
    the reserved regional address (named, not given as an IP), open only to
    `access.allowedCidrs` (GKE turns loadBalancerSourceRanges into the load balancer's firewall
    rule: ingress-gce `pkg/l4/resources/l4netlb.go`)."""
    annotations: dict[str, Any] = {
        **L4_RBS,
        STATIC_ADDRESSES_ANNOTATION: address_name,
        # pulumi-kubernetes' own Service await (provider/pkg/await/service.go) is ready only with
        # a load-balancer address *and* no not-ready endpoint, on create, update and refresh
        # (await.go: `Read` skips it only for skipAwait; `pulumi.com/waitFor` replaces it on
        # create and update, not on refresh). A starting replica, normal after every flex-start
        # node recycle, is a not-ready endpoint: an update would wait out its timeout and a
        # refresh fail. So the Service is not awaited; the readiness Job, which reaches the pods
        # through it, is what `pulumi up` waits on.
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
