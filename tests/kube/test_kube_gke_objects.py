"""The GKE stack's Kubernetes objects, as the program renders them, on a real API server.

The objects come from the `v6e4-gke` program under mocks (tests/support/gke_manifests.py). They
are created on the Kubernetes layer's control plane (tests/support/kube_cluster.py), in the order of
their dependencies, with strict field validation: the API server's defaulting, validation and
admission, the CRDs' structural schemas (from their projects' modules, tests/support/kube_crds.py),
then the scheduler and the controllers acting on them with kwok's GKE-shaped TPU nodes. Where the
engine would pass another resource's output (the pods' owner ConfigMap's uid), the test passes
the server's.

The other variants' objects (tests/support/gke_manifests.py) are judged by dry runs, and objects
with one field broken show that the judgement can fail. The same objects through `pulumi up` and the
real pulumi-kubernetes provider: tests/engine/test_kube_engine_gke.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import kube_cluster, kube_crds
from tests.support.gke_manifests import STACK, VARIANTS, manifests
from tests.support.pulumi_program import run_program

pytestmark = pytest.mark.kube

#: Kinds made before the others: what they are created in or refer to.
ORDER = ["Namespace", "ServiceAccount", "ConfigMap", "Role", "RoleBinding"]


def _order(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objs, key=lambda o: ORDER.index(o["kind"]) if o["kind"] in ORDER else len(ORDER))


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    run = run_program(STACK, VARIANTS[next(iter(VARIANTS))])
    return manifests(run)


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory, objects: list[dict[str, Any]]
) -> Iterator[kube_cluster.ControlPlane]:
    with kube_cluster.running(tmp_path_factory.mktemp("kube")) as cp:
        [deployment] = [o for o in objects if o["kind"] == "Deployment"]
        compute_class = deployment["spec"]["template"]["spec"]["nodeSelector"][
            "cloud.google.com/compute-class"
        ]
        cp.add_node(kube_cluster.system_node("system-0"))
        # One TPU node per replica and one for the rolling update's surge.
        for i in range(deployment["spec"]["replicas"] + 1):
            cp.add_node(kube_cluster.tpu_node(f"tpu-{i}", compute_class))
        for crd in kube_crds.gke_crds():
            cp.install_crd(crd)
        yield cp


@pytest.fixture(scope="module")
def created(
    plane: kube_cluster.ControlPlane, objects: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every object created, keyed by kind/name; failures collected, not raised one by one."""
    made: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    owner_uid: dict[str, str] = {}
    for obj in _order(copy.deepcopy(objects)):
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap" and not meta.get("name"):
            # The pods' owner is auto-named by Pulumi; the Deployment names it in its reference.
            [deployment] = [o for o in objects if o["kind"] == "Deployment"]
            meta["name"] = deployment["metadata"]["ownerReferences"][0]["name"]
        for ref in meta.get("ownerReferences") or []:
            ref["uid"] = owner_uid[ref["name"]]
        status, body = plane.create(obj)
        if status != 201:
            refused.append(f"{obj['kind']} {meta['name']}: {status} {body.get('message')}")
            continue
        owner_uid[meta["name"]] = body["metadata"]["uid"]
        made[f"{obj['kind']}/{meta['name']}"] = body
    assert not refused, "\n".join(refused)
    return made


def dry_run(plane: kube_cluster.ControlPlane, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A create the server judges in full (defaulting, validation, admission, the CRDs'
    schemas and CEL rules) and then forgets (`dryRun=All`), with strict field validation."""
    return plane.request("POST", f"{plane.collection(obj)}?fieldValidation=Strict&dryRun=All", obj)


def moved(obj: dict[str, Any], namespace: str, suffix: str) -> dict[str, Any]:
    """`obj` in another namespace (and a cluster-scoped one under another name), so that each
    variant is judged beside the objects already made rather than against them."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    if out["kind"] == "Namespace":
        meta["name"] = namespace
    elif "namespace" in meta:
        meta["namespace"] = namespace
    else:
        meta["name"] = f"{meta['name']}-{suffix}"
    for subject in out.get("subjects") or []:
        subject["namespace"] = namespace
    return out


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != next(iter(VARIANTS))])
def test_every_variants_objects_are_accepted_with_strict_validation_and_no_warning(
    plane: kube_cluster.ControlPlane, created: dict[str, dict[str, Any]], variant: str
) -> None:
    """The stack file's objects are created below; the other variants' are judged by a dry run
    each, in a namespace of their own (created for real: a dry run needs it to exist)."""
    objs = manifests(run_program(STACK, VARIANTS[variant]))
    namespace = f"variant-{variant}"
    warned = len(plane.warnings)
    refused: list[str] = []
    for original in _order(objs):
        obj = moved(original, namespace, variant)
        if obj["kind"] == "Namespace":
            plane.apply(obj)
            continue
        if obj["kind"] == "ConfigMap" and not obj["metadata"].get("name"):
            obj["metadata"]["name"] = "pods-owner"  # auto-named by Pulumi
        status, body = dry_run(plane, obj)
        if status != 201:
            refused.append(
                f"{obj['kind']} {obj['metadata']['name']}: {status} {body.get('message')}"
            )
    assert not refused, "\n".join(refused)
    assert plane.warnings[warned:] == []


@pytest.mark.parametrize(
    "case",
    [
        ("Deployment", ("spec", "replicas"), "two", "replicas"),
        ("Deployment", ("spec", "strategy", "type"), "Rolling", "Unsupported value"),
        ("Deployment", ("spec", "template", "spec", "tolerations"), {"key": "x"}, "tolerations"),
        ("Deployment", ("spec", "template", "spec", "nodeSelectr"), {}, "unknown field"),
        ("PodDisruptionBudget", ("spec", "minAvailabe"), 1, "unknown field"),
        ("PodDisruptionBudget", ("spec", "selector"), ["app"], "selector"),
        ("Job", ("spec", "template", "spec", "restartPolicy"), "Always", "restartPolicy"),
        ("PodMonitoring", ("spec", "endpoints", 0, "port"), None, "port"),
        ("PodMonitoring", ("spec", "endpoints", 0, "scrapeEvery"), "1m", "unknown field"),
    ],
    ids=[
        "replicas-not-a-number",
        "unknown-strategy",
        "tolerations-not-a-list",
        "typo",
        "budget-typo",
        "selector-not-an-object",
        "job-restarts-always",
        "scrape-without-a-port",
        "scrape-typo",
    ],
)
def test_the_server_refuses_an_object_with_one_field_broken(
    plane: kube_cluster.ControlPlane,
    objects: list[dict[str, Any]],
    created: dict[str, dict[str, Any]],
    case: tuple[str, tuple[str | int, ...], Any, str],
) -> None:
    """The acceptance above can fail: the same server, asked the same way, refuses each."""
    kind, path, value, said = case
    [obj] = [copy.deepcopy(o) for o in objects if o["kind"] == kind]
    obj["metadata"]["name"] = f"broken-{obj['metadata']['name']}"
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    status, body = dry_run(plane, obj)
    assert status in (400, 422), (status, body)
    assert said in str(body.get("message")), body.get("message")


def test_every_object_is_accepted_with_strict_validation_and_no_warning(
    plane: kube_cluster.ControlPlane,
    objects: list[dict[str, Any]],
    created: dict[str, dict[str, Any]],
) -> None:
    assert len(created) == len(objects)
    assert plane.warnings == []


def test_replicas_land_on_tpu_nodes_and_become_available(
    plane: kube_cluster.ControlPlane, created: dict[str, dict[str, Any]]
) -> None:
    [deployment] = [v for k, v in created.items() if k.startswith("Deployment/")]
    path = plane.path(deployment)
    want = deployment["spec"]["replicas"]

    def available() -> bool:
        return bool(plane.get(path).get("status", {}).get("availableReplicas") == want)

    plane.wait_for("the Deployment's replicas", available, 90)
    namespace = deployment["metadata"]["namespace"]
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    pods = plane.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(pods) == want
    assert all(n.startswith("tpu-") for n in nodes)
    assert len(nodes) == want  # 4 chips each: one replica per node
    # Their CPU and memory requests fit a GKE-shaped node and make them Burstable, not the
    # BestEffort pods the kubelet evicts first (components/gke/pod_resources.py).
    assert {p["status"]["qosClass"] for p in pods} == {"Burstable"}
    # The PDB's status is kept by the disruption controller from those pods.
    [pdb] = [v for k, v in created.items() if k.startswith("PodDisruptionBudget/")]

    def pdb_counted() -> bool:
        return bool(plane.get(plane.path(pdb)).get("status", {}).get("currentHealthy") == want)

    plane.wait_for("the PDB's status", pdb_counted, 60)


def test_readiness_job_runs_to_completion(
    plane: kube_cluster.ControlPlane, created: dict[str, dict[str, Any]]
) -> None:
    """kwok completes the Job's pod without running its script
    (tests/loopback/test_gke_readiness_job.py runs that script for real): this proves the Job is
    schedulable here, on the untainted system node, and that the Job controller calls it done."""
    [job] = [v for k, v in created.items() if k.startswith("Job/")]
    deadline = time.monotonic() + 90
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = plane.get(plane.path(job)).get("status", {})
        if status.get("succeeded"):
            break
        time.sleep(0.5)
    assert status.get("succeeded") == 1, status
    namespace = job["metadata"]["namespace"]
    pods = plane.get(
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name={job['metadata']['name']}"
    )
    assert [p["spec"]["nodeName"] for p in pods["items"]] == ["system-0"]


def test_deleting_the_owner_in_the_foreground_removes_the_pods_first(
    plane: kube_cluster.ControlPlane, created: dict[str, dict[str, Any]]
) -> None:
    """The garbage collector deletes the Deployment, its ReplicaSet and pods before the owner
    ConfigMap goes (blockOwnerDeletion; components/gke/pod_owner.py)."""
    [deployment] = [v for k, v in created.items() if k.startswith("Deployment/")]
    owner_name = deployment["metadata"]["ownerReferences"][0]["name"]
    namespace = deployment["metadata"]["namespace"]
    owner_path = f"/api/v1/namespaces/{namespace}/configmaps/{owner_name}"
    status, body = plane.request(
        "DELETE",
        owner_path,
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    assert status in (200, 202), body
    # The DELETE's answer is the owner as stored: held with the foregroundDeletion finalizer,
    # which the garbage collector removes only after the dependents are gone.
    assert "foregroundDeletion" in (body["metadata"].get("finalizers") or []), body["metadata"]

    def gone() -> bool:
        return plane.request("GET", owner_path)[0] == 404

    plane.wait_for("the owner ConfigMap's foreground deletion", gone, 90)
    assert plane.request("GET", plane.path(deployment))[0] == 404
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    pods = plane.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
    assert pods == []


def set_taints(plane: kube_cluster.ControlPlane, node: str, change: Any) -> None:
    """Read, change and write a node's taints, again on a 409 (kwok updates nodes too)."""
    path = f"/api/v1/nodes/{node}"
    for _ in range(20):
        found = plane.get(path)
        found["spec"]["taints"] = change(found["spec"].get("taints") or [])
        status, body = plane.request("PUT", path, found)
        if status == 200:
            return
        assert status == 409, (status, body.get("message"))
    raise AssertionError(f"node {node}: 20 conflicting writes")


def test_the_readiness_job_runs_where_every_node_is_tainted(
    plane: kube_cluster.ControlPlane, created: dict[str, dict[str, Any]]
) -> None:
    """An existing cluster whose every pool is tainted: here the system node
    is tainted for another team, so the stack's own TPU nodes, with their `google.com/tpu` and
    class taints, are the only place left. The Job tolerates both and runs there."""
    [job] = [v for k, v in created.items() if k.startswith("Job/")]
    taint = {"key": "dedicated", "value": "another-team", "effect": "NoSchedule"}
    set_taints(plane, "system-0", lambda taints: [*taints, taint])
    copy_of = copy.deepcopy(job)
    namespace = copy_of["metadata"]["namespace"]
    copy_of["metadata"] = {"name": "vllm-ready-tainted", "namespace": namespace}
    spec = copy_of["spec"]
    spec.pop("selector", None)
    spec["template"]["metadata"] = {"labels": {"app.kubernetes.io/component": "readiness"}}
    job_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/vllm-ready-tainted"
    try:
        plane.apply(copy_of)
        pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name=vllm-ready-tainted"

        def placed() -> bool:
            items = plane.get(pods)["items"]
            return bool(items and items[0]["spec"].get("nodeName"))

        plane.wait_for("the Job's pod to be scheduled", placed, 60)
        [pod] = plane.get(pods)["items"]
        assert pod["spec"]["nodeName"].startswith("tpu-"), pod["spec"]["nodeName"]
    finally:
        set_taints(plane, "system-0", lambda taints: [t for t in taints if t != taint])
        background = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        plane.request("DELETE", job_path, background)
    assert taint not in (plane.get("/api/v1/nodes/system-0")["spec"].get("taints") or [])
