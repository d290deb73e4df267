"""The GKE manifests against what the real systems do with them (each test names its source).

A real API server proves the objects are *valid* and pulumi-kubernetes' await and delete logic
(tests/kube/, tests/engine/test_kube_engine_gke.py); these prove they *work* where no local server
can tell: the kubelet's service-account token mount under containerd, IAM's Workload Identity pool,
GKE's load-balancer controller (ingress-gce) and node pools shared with other workloads. Each check
is written from the named source, under Pulumi mocks, over every pod spec and variant the program
renders.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pulumi.runtime import mocks

from tests.support.mock_outputs import existing_cluster
from tests.support.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
JOB = "kubernetes:batch/v1:Job"
SERVICE = "kubernetes:core/v1:Service"


#: Every shape the program renders pods in: with and without the compile cache's init container
#: and sidecar, and in a cluster it creates or one it is given.
VARIANTS: dict[str, dict[str, Any]] = {
    "stack-file": {},
    "cache-off": {"changes": {"tpu-vllm:cache.enabled": False}},
    "existing-cluster": {
        "changes": {"tpu-vllm:gke.cluster": "shared"},
        "call": existing_cluster(),
    },
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request: pytest.FixtureRequest) -> ProgramRun:
    variant = VARIANTS[request.param]
    return run_program(STACK, variant.get("changes"), call=variant.get("call"))


# --- 1. secrets mounted where the service-account token can still be mounted ----------------

#: Where the kubelet mounts every pod's service-account token (the pods automount it: none of
#: them sets `automountServiceAccountToken: false`).
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def _canonical(path: str) -> str:
    """`/var/run` is a symlink to `/run` in Debian and Alpine images: one directory."""
    path = posixpath.normpath(path)
    if path == "/var/run" or path.startswith("/var/run/"):
        path = "/run" + path[len("/var/run") :]
    return path


def _at_or_above(directory: str, path: str) -> bool:
    return directory in ("/", path) or path.startswith(directory.rstrip("/") + "/")


def blocks_token_mount(mount_path: str) -> bool:
    """True if a volume at `mount_path` keeps the kubelet from mounting the token.

    containerd sorts a container's mounts by path depth (`internal/cri/opts/spec_linux_opts.go`,
    `withMounts`: "Sort mounts in number of parts"), so a volume at the token's directory or
    above it is mounted first; the token's mount point must then be created inside that
    read-only volume, which fails ("mkdir .../run/secrets/kubernetes.io: read-only file
    system", kubernetes/kubernetes#65835 and #72261). Both spellings count: a volume at `/var`
    hides the `/var/run` symlink, one at `/run/secrets` is where that symlink leads.
    """
    raw = posixpath.normpath(mount_path)
    return _at_or_above(raw, TOKEN_DIR) or _at_or_above(_canonical(raw), _canonical(TOKEN_DIR))


@pytest.mark.parametrize(
    ("mount_path", "blocks"),
    [
        ("/run/secrets", True),
        ("/var/run/secrets", True),
        ("/run/secrets/", True),
        ("/run", True),
        ("/var/run", True),
        ("/var", True),
        ("/", True),
        ("/run/secrets/kubernetes.io", True),
        ("/var/run/secrets/kubernetes.io/serviceaccount", True),
        ("/run/secrets/kubernetes.io/serviceaccount", True),
        ("/run/secrets/tpu-vllm", False),  # a sibling of kubernetes.io: kubernetes#65835's fix
        ("/var/run/tpu-vllm", False),
        ("/etc/tpu-vllm/secrets", False),
        ("/var/secrets", False),
        ("/root/.cache/vllm", False),
    ],
)
def test_the_token_mount_check_knows_both_spellings(mount_path: str, blocks: bool) -> None:
    assert blocks_token_mount(mount_path) is blocks


def pod_specs(value: Any) -> Iterator[dict[str, Any]]:
    """Every pod spec in a manifest, wherever it sits (a dict with a `containers` list)."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield value
        for child in value.values():
            yield from pod_specs(child)
    elif isinstance(value, list):
        for child in value:
            yield from pod_specs(child)


def all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *pod.get("initContainers", []),
        *pod["containers"],
        *pod.get("ephemeralContainers", []),
    ]


def test_no_volume_in_any_pod_blocks_the_service_account_token(run: ProgramRun) -> None:
    """The server, its init container and sidecar, and the readiness Job's container."""
    checked: list[tuple[str, str, str]] = []
    kinds: set[str] = set()
    for resource in run.resources:
        if not resource.type.startswith("kubernetes:"):
            continue
        for pod in pod_specs(resource.inputs):
            kinds.add(resource.type)
            assert pod.get("automountServiceAccountToken", True) is True
            for container in all_containers(pod):
                for mount in container.get("volumeMounts", []):
                    where = (resource.name, container["name"], mount["mountPath"])
                    assert not blocks_token_mount(mount["mountPath"]), where
                    checked.append(where)
    assert kinds == {DEPLOYMENT, JOB}
    assert any(container == "wait-ready" for _, container, _ in checked)
    assert any(container == "vllm" for _, container, _ in checked)


def _secrets_dir(container: dict[str, Any], pod: dict[str, Any]) -> str:
    """The mount path of the container's Secret Manager (CSI) volume."""
    csi = {v["name"] for v in pod["volumes"] if "csi" in v}
    [path] = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in csi]
    return str(path)


def test_every_secret_file_the_containers_read_lies_in_the_mounted_directory(
    run: ProgramRun,
) -> None:
    [server_pod] = pod_specs(run.one(DEPLOYMENT).inputs)
    [server] = [c for c in server_pod["containers"] if c["name"] == "vllm"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    directory = _secrets_dir(server, server_pod)
    for variable, file in (("HF_TOKEN_PATH", "hf_token"), ("VLLM_API_KEY_FILE", "vllm_api_key")):
        assert env[variable] == f"{directory}/{file}", variable
    [job_pod] = pod_specs(run.one(JOB).inputs)
    [probe] = job_pod["containers"]
    env = {e["name"]: e.get("value") for e in probe["env"]}
    assert env["API_KEY_FILE"] == f"{_secrets_dir(probe, job_pod)}/vllm_api_key"


#: The scripts that read the API key, and the variable naming the file each reads. Their own
#: defaults are the VM's `/run/secrets` (vllm_entrypoint.sh, where docker mounts it) or none
#: (gke_wait_ready.sh fails without it): every pod that runs one must set the variable.
KEY_READERS = {
    "/tpu-vllm/entrypoint.sh": "VLLM_API_KEY_FILE",
    "/tpu-vllm/wait_ready.sh": "API_KEY_FILE",
}


def test_every_container_that_reads_the_key_names_its_file_in_the_mounted_directory(
    run: ProgramRun,
) -> None:
    found = set()
    for resource in run.resources:
        for pod in pod_specs(resource.inputs) if resource.type.startswith("kubernetes:") else []:
            for container in all_containers(pod):
                command = [*container.get("command", []), *container.get("args", [])]
                for script, variable in KEY_READERS.items():
                    if script in command:
                        env = {e["name"]: e.get("value") for e in container.get("env", [])}
                        where = (resource.name, container["name"], variable)
                        assert env.get(variable) == (
                            f"{_secrets_dir(container, pod)}/vllm_api_key"
                        ), where
                        found.add(script)
    assert found == set(KEY_READERS)


# --- 2. the Workload Identity binding waits for a cluster the stack creates ------------------


def test_workload_identity_binding_is_created_after_the_cluster() -> None:
    """IAM answers `Error 400: Identity Pool does not exist (PROJECT.svc.id.goog)` until the
    project's first Workload Identity cluster exists; terraform-google-kubernetes-engine PR #301
    fixed this race by tying the binding to the cluster. The engine creates a resource only
    after everything it depends on."""
    run = run_program(STACK)
    binding = run.one("gcp:serviceaccount/iAMMember:IAMMember")
    assert binding.inputs["role"] == "roles/iam.workloadIdentityUser"
    assert "gke-cluster" in run.dependencies[binding.name]


def test_with_an_existing_cluster_the_binding_has_no_cluster_to_wait_for() -> None:
    run = run_program(STACK, {"tpu-vllm:gke.cluster": "shared"}, call=existing_cluster())
    assert run.of_type("gcp:container/cluster:Cluster") == []
    binding = run.one("gcp:serviceaccount/iAMMember:IAMMember")
    assert binding.inputs["member"].endswith("[tpu-vllm-v6e4-gke/vllm]")


# --- 3. what pulumi-kubernetes awaits: proven by the real provider -------------------------
# tests/engine/test_kube_engine_gke.py creates the Service, updates the Deployment and refreshes the
# stack with pulumi-kubernetes' own provider, and no load balancer ever answers for the Service:
# only the readiness Job is awaited. The Service itself is never updated there; the provider's
# update takes the same skipAwait test as its create (`provider/pkg/await/await.go`
# `ReadyCondition`). The model of that file that stood here is retired.


# --- 4. the load balancer GKE recommends, on the reserved address by name ---------------------


def test_service_is_an_rbs_network_load_balancer_on_the_reserved_address_by_name(
    run: ProgramRun,
) -> None:
    """ingress-gce `pkg/l4/annotations/service.go` (`cloud.google.com/l4-rbs: "enabled"`) and
    `pkg/l4/annotations/l4_static_address.go` + `pkg/l4/address/to_use.go`: the annotation
    holds address NAMES, looked up in the cluster's region; a name not found is skipped and the
    load balancer takes an ephemeral IP, so the address must exist before the Service."""
    service = run.one(SERVICE)
    address = run.one("gcp:compute/address:Address")
    annotations = service.inputs["metadata"]["annotations"]
    assert annotations["cloud.google.com/l4-rbs"] == "enabled"
    assert annotations["networking.gke.io/load-balancer-ip-addresses"] == address.inputs["name"]
    assert address.inputs["region"] == "us-east5"  # the cluster's region
    assert "gke-address" in run.dependencies[service.name]
    spec = service.inputs["spec"]
    assert "loadBalancerIP" not in spec  # deprecated since Kubernetes 1.24
    assert spec["type"] == "LoadBalancer"
    assert spec["loadBalancerSourceRanges"] == ["203.0.113.0/24"]


SERVICE_URN = (
    "urn:pulumi:v6e4-gke::tpu-vllm::tpu-vllm:index:GkeWorkload"
    "$kubernetes:core/v1:Service::vllm-service"
)


def test_a_service_applied_without_the_rbs_annotation_is_replaced_not_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ingress-gce `pkg/l4/controllers/l4netlbcontroller.go`
    (`preventExistingTargetPoolToRBSMigration`): adding `cloud.google.com/l4-rbs` to a
    Service that already has a target-pool load balancer only earns a CanNotMigrateTargetPool
    ToRBS event, and the controller deletes the annotation. So a change of the Service's
    annotations (the stacks deployed before it had none) must replace it: the engine turns a
    change under a `replaceOnChanges` path into a replacement (pulumi `step_generator.go`
    `applyReplaceOnChanges`, path `Contains`), and pulumi-kubernetes asks to delete first only
    when it wants the replacement itself (`provider.go` Diff), so the program asks for it: the
    name is fixed. The URN is the one docs/gke.md's `pulumi up --replace` names."""
    requests: dict[str, Any] = {}
    register: Callable[[mocks.MockMonitor, Any], Any] = mocks.MockMonitor.RegisterResource

    def recording(self: mocks.MockMonitor, request: Any) -> Any:
        requests[request.name] = request
        return register(self, request)

    monkeypatch.setattr(mocks.MockMonitor, "RegisterResource", recording)
    run = run_program(STACK)
    service = requests["vllm-service"]
    assert service.type == SERVICE
    assert list(service.replaceOnChanges) == ["metadata.annotations"]
    assert service.deleteBeforeReplace is True
    assert "cloud.google.com/l4-rbs" in run.one(SERVICE).inputs["metadata"]["annotations"]
    assert run.urn_of("vllm-service") == SERVICE_URN
    # Nothing else the workload owns is replaced on an annotation change.
    assert not requests["vllm-deployment"].replaceOnChanges


# --- 7. the pods run on the stack's own TPU nodes ---------------------------------------------


def test_pods_are_pinned_to_the_stacks_own_compute_class(run: ProgramRun) -> None:
    """In a shared cluster another v6e 2x2 pool matches the TPU labels too. The pods select the
    ComputeClass this stack owns (`cloud.google.com/compute-class`, GKE docs "About custom
    ComputeClasses"), whose auto-created pools carry that label and a matching taint: only
    nodes made for this stack's class take these pods.

    By the class alone, as the reference does (GoogleCloudPlatform/accelerated-platforms
    `online-inference-tpu/vllm/v6e-gemma-4-31b-it/patch-nodeselector.yaml` has exactly one
    selector, `cloud.google.com/compute-class`); Google's notes advise against mixing a class
    with other hard node selectors (GoogleCloudPlatform/gke-mcp `gke-compute-class-creator`),
    and no GKE source says the TPU labels are accepted and needed beside it. The class's rule
    names the slice instead."""
    [node_class] = [r for r in run.resources if r.type.endswith(":ComputeClass")]
    [pod] = pod_specs(run.one(DEPLOYMENT).inputs)
    name = node_class.inputs["metadata"]["name"]
    assert pod["nodeSelector"] == {"cloud.google.com/compute-class": name}
    assert name.startswith("tpu-vllm-")  # the stack's own, not a shared class
    assert not pod.get("affinity")  # no node affinity sneaks the labels back in
    [rule] = node_class.inputs["spec"]["priorities"]
    assert rule["tpu"]["type"] == "tpu-v6e-slice"
    assert rule["tpu"]["topology"] == "2x2"
    assert node_class.name in run.dependencies["vllm-deployment"]


# --- bug (b): the readiness Job runs only after the Deployment is applied ---------------------


def test_readiness_job_is_created_after_the_deployment(run: ProgramRun) -> None:
    """On an update, a new Job created before the new pod template is applied would find the
    old pods serving, and `pulumi up` would report success before the new pods serve."""
    job = run.one(JOB)
    assert "vllm-deployment" in run.dependencies[job.name]


# --- the pods need no grant of their own -------------------------------------------------------


def test_the_pods_read_nothing_from_the_api_server(run: ProgramRun) -> None:
    """The compile cache's generation is the pinned image's digest, handed to the init
    container (components/image_pin.py): no pod reads its own status for the kubelet's
    `imageID` any more, so the only RBAC the stack makes is the readiness Job's."""
    roles = {r.name for r in run.resources if r.type.startswith("kubernetes:rbac.")}
    assert roles == {"vllm-rollout-reader", "vllm-rollout-reader-binding"}


# --- the readiness Job reads the rollout it waits for -----------------------------------------


def test_the_readiness_job_may_read_the_deployment_and_only_it(run: ProgramRun) -> None:
    """scripts/remote/gke_wait_ready.sh reads `GET .../deployments/vllm` with the pod's token
    before it asks the Service (kube-proxy's fallback to terminating endpoints,
    `pkg/proxy/topology.go`, would otherwise let an old pod answer). RBAC (Kubernetes docs
    "Using RBAC Authorization": `resourceNames` limits a rule to the named objects) must grant
    exactly that to the KSA the Job runs as, before the Job starts: a 403 fails the Job."""
    role = run.named("vllm-rollout-reader").inputs
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": [run.one(DEPLOYMENT).inputs["metadata"]["name"]],
            "verbs": ["get"],
        }
    ]
    binding = run.named("vllm-rollout-reader-binding").inputs
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    job = run.one(JOB)
    [pod] = pod_specs(job.inputs)
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": pod["serviceAccountName"],
            "namespace": "tpu-vllm-v6e4-gke",
        }
    ]
    assert pod["automountServiceAccountToken"] is True  # the token the script sends
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DEPLOYMENT"] == run.one(DEPLOYMENT).inputs["metadata"]["name"]
    assert {"vllm-rollout-reader", "vllm-rollout-reader-binding"} <= run.dependencies[job.name]
