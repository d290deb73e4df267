"""`v6e4-gke` on an existing cluster, through the real Pulumi CLI and the real pulumi-kubernetes
provider, against a real kube-apiserver with its controllers, scheduler and kwok's TPU nodes
(tests/support/kube_stack.py says what is real and what stands in).

One stack's life, one test per step, in order (tests/support/engine_stack.py `Lifecycle`; the
suite's scheduler keeps them on one worker: tests/conftest.py): up, the outputs, a second up, a flag
change that rolls the Deployment, bad input, destroy.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import pytest

from components.gke import compute_class, k8s_manifests
from tests.support import compute_class_crd
from tests.support.engine_stack import HF_TOKEN, PASSPHRASE, EngineStack, Lifecycle, events, steps
from tests.support.kube_stack import CLUSTER_PATH, STACK, GkeFakes, gke_engine_stack
from tests.support.mock_outputs import existing_cluster
from tests.support.output_contract import problems
from tests.support.pulumi_program import run_program
from tests.support.server_pod_uses import used_by_the_server_pods

pytestmark = pytest.mark.kube

#: The namespace and the names the program gives the stack's objects (components/gke/).
NAMESPACE = k8s_manifests.namespace_name(STACK)
CLASS = compute_class.class_name(STACK)
DEPLOYMENT = k8s_manifests.DEPLOYMENT
JOB = "vllm-ready"
#: Where the stack's objects live: every kind it creates, namespaced or cluster-scoped.
NAMESPACED = {
    "deployments": "/apis/apps/v1",
    "replicasets": "/apis/apps/v1",
    "pods": "/api/v1",
    "services": "/api/v1",
    "configmaps": "/api/v1",
    "serviceaccounts": "/api/v1",
    "jobs": "/apis/batch/v1",
    "poddisruptionbudgets": "/apis/policy/v1",
    "roles": "/apis/rbac.authorization.k8s.io/v1",
    "rolebindings": "/apis/rbac.authorization.k8s.io/v1",
    "secretproviderclasses": "/apis/secrets-store.csi.x-k8s.io/v1",
    "podmonitorings": "/apis/monitoring.googleapis.com/v1",
}

Engine = EngineStack[GkeFakes]

#: A cluster policy of the kind platform teams set (a ValidatingAdmissionPolicy, GA in
#: Kubernetes 1.30, admissionregistration.k8s.io/v1): no Deployment above two replicas. The API
#: server, not the program, refuses a third.
POLICY = "at-most-two-replicas"
POLICY_MESSAGE = "this cluster allows at most two replicas per Deployment"


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    with gke_engine_stack(tmp_path_factory.mktemp("kube-engine-gke"), CLASS) as engine:
        yield Lifecycle(engine)


def api(engine: Engine, path: str) -> dict[str, Any]:
    return engine.fakes.plane.get(path)


def in_namespace(engine: Engine, plural: str) -> list[dict[str, Any]]:
    items = api(engine, f"{NAMESPACED[plural]}/namespaces/{NAMESPACE}/{plural}")["items"]
    return list(items)


def deployment(engine: Engine) -> dict[str, Any]:
    return api(engine, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}")


def rolled_out(engine: Engine) -> bool:
    """`kubectl rollout status`'s test (kubectl pkg/polymorphichelpers/rollout_status.go)."""
    found = deployment(engine)
    spec, status = found["spec"], found.get("status") or {}
    return bool(
        status.get("observedGeneration", 0) >= found["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == spec["replicas"]
        and status.get("replicas", 0) == spec["replicas"]
        and status.get("availableReplicas", 0) == spec["replicas"]
    )


def job_awaited(engine: Engine) -> bool:
    """The provider waited for the readiness Job to complete: its await (pulumi-kubernetes
    `provider/pkg/await/job.go`) ends on the `Complete` condition, and the object it then
    records, in the state, carries it. kwok completes the pod within a second, whether or not
    anything waits, so the server's view alone would prove nothing."""
    found = engine.resource(JOB)
    status = (found or {}).get("outputs", {}).get("status") or {}
    complete = [c for c in status.get("conditions") or [] if c.get("type") == "Complete"]
    return bool(complete and complete[0].get("status") == "True" and status.get("succeeded") == 1)


def wait_rolled_out(engine: Engine, timeout: float = 90.0) -> None:
    """Until the rollout is complete: a replaced pod lingers through its grace period (kwok's
    pod-delete stage, tests/support/kube_cluster.py), and kwok completes the readiness Job without
    running its script, which in a real cluster waits for exactly this."""
    deadline = time.monotonic() + timeout
    while not rolled_out(engine):
        assert time.monotonic() < deadline, deployment(engine).get("status")
        time.sleep(0.5)


def assert_no_sentinel(text: str, life: Lifecycle, where: str) -> None:
    found = {"HF token": HF_TOKEN, "passphrase": PASSPHRASE, "cluster token": life.memo["token"]}
    if "api_key" in life.memo:
        found["API key"] = life.memo["api_key"]
    for name, value in found.items():
        assert value not in text, f"the {name} shows in plain text in {where}"


def test_up_creates_the_workload_on_the_real_api_server(life: Lifecycle) -> None:
    with life.step("up"):
        engine = life.engine
        life.memo["token"] = (engine.fakes.plugin_dir / "token").read_text()
        log = engine.work / "up.events.jsonl"
        run = engine.up(events=log, timeout=1200).check()
        life.memo["up_output"] = run.output
        # The CRD wait asked the real server, through the auth plugin, and saw them served.
        assert f"{CLUSTER_PATH}: CRDs served after" in run.output, run.output[-3000:]
        # Before the pods: the cluster would admit them (Pod Security, QoS); beside the Job:
        # where its pod was placed (components/gke/pod_admission.py, readiness_watch.py).
        assert "admits the pods (QoS: server Burstable, readiness Burstable)" in run.output
        assert re.search(r"readiness pod vllm-ready-\S+ scheduled on node \S+", run.output), (
            run.output[-3000:]
        )
        plugin_calls = (engine.fakes.plugin_dir / "plugin.log").read_text().splitlines()
        assert plugin_calls, "nothing authenticated through gke-gcloud-auth-plugin"
        cluster = api(engine, f"/apis/cloud.google.com/v1/computeclasses/{CLASS}")
        assert cluster["spec"]["priorities"][0]["flexStart"]["enabled"] is True
        # Every replica on its own kwok TPU node, ready.
        wait_rolled_out(engine)
        pods = [
            p for p in in_namespace(engine, "pods") if p["metadata"]["name"].startswith("vllm-")
        ]
        servers = [p for p in pods if "job-name" not in p["metadata"].get("labels", {})]
        nodes = [p["spec"].get("nodeName") for p in servers]
        assert len(servers) == 2 and len(set(nodes)) == 2, nodes
        assert all(str(n).startswith("tpu-") for n in nodes), nodes
        # The Service, the budget, the scrape config and both secret mounts' classes.
        for plural in ("services", "poddisruptionbudgets", "podmonitorings"):
            assert in_namespace(engine, plural), plural
        assert len(in_namespace(engine, "secretproviderclasses")) == 2
        # The readiness Job ran to completion on the system node, awaited by the provider.
        job = api(engine, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}")
        assert job["status"].get("succeeded") == 1, job["status"]
        assert job_awaited(engine)
        done = [name for kind, op, name in steps(events(log)) if kind == "done"]
        assert done.index("vllm-crds") < done.index("vllm-compute-class")
        assert done.index("vllm-deployment") < done.index("vllm-ready")
        assert_no_sentinel(run.output, life, "the output of `pulumi up`")


def allowed(engine: Engine, verb: str, resource: str, name: str = "") -> bool:
    """RBAC's answer for the pods' KSA, which the readiness Job runs as (a SubjectAccessReview:
    the API server's own authorizer, as the Job's reads would meet it)."""
    attributes = {"namespace": NAMESPACE, "verb": verb, "group": "apps", "resource": resource}
    if name:
        attributes["name"] = name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{k8s_manifests.KSA}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            "resourceAttributes": attributes,
        },
    }
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    status, answer = engine.fakes.plane.request("POST", path, review)
    assert status == 201, answer
    return bool(answer["status"].get("allowed"))


def test_the_readiness_job_may_read_its_deployment_and_nothing_else(life: Lifecycle) -> None:
    """kwok never runs the Job's script, so its reads are asked of RBAC directly: `get` on the
    one Deployment (the rollout it waits for), and no list, watch, other name or write."""
    with life.step("rbac", after="up"):
        engine = life.engine
        assert allowed(engine, "get", "deployments", DEPLOYMENT)
        assert not allowed(engine, "list", "deployments")
        assert not allowed(engine, "watch", "deployments", DEPLOYMENT)
        assert not allowed(engine, "get", "deployments", "another")
        assert not allowed(engine, "patch", "deployments", DEPLOYMENT)
        assert not allowed(engine, "get", "replicasets")


def test_outputs_meet_the_contract(life: Lifecycle) -> None:
    with life.step("outputs", after="up"):
        engine = life.engine
        hidden = engine.outputs()
        shown = engine.outputs(show_secrets=True)
        life.memo["api_key"] = str(shown["api_key"])
        secret = {name for name, value in hidden.items() if value == "[secret]"}
        found = problems(shown, config=engine.stack_config(), secret=secret)
        assert not found, "; ".join(found)
        assert shown["cluster"] == CLUSTER_PATH
        nightly = engine.fakes.registry.digest("vllm/vllm-tpu", "nightly")
        assert shown["image"] == f"vllm/vllm-tpu@{nightly}"
        # The pods run the pinned digest, not the tag.
        images = {c["image"] for c in deployment(engine)["spec"]["template"]["spec"]["containers"]}
        assert f"vllm/vllm-tpu@{nightly}" in images, images
        for path in engine.state_files():
            assert_no_sentinel(path.read_text(errors="replace"), life, str(path))


def test_a_second_up_reports_no_changes(life: Lifecycle) -> None:
    with life.step("no-changes", after="outputs"):
        engine = life.engine
        generation = deployment(engine)["metadata"]["generation"]
        log = engine.work / "second-up.events.jsonl"
        run = engine.up("--expect-no-changes", events=log, timeout=1200).check()
        ops = {op for _, op, _ in steps(events(log))}
        assert ops <= {"same"}, (ops, run.output[-3000:])
        assert deployment(engine)["metadata"]["generation"] == generation


def test_a_flag_change_rolls_the_deployment_and_replaces_the_job(life: Lifecycle) -> None:
    """A new server flag: a new pod template, rolled one replica at a time (maxSurge 1,
    maxUnavailable 0: sampled from the server while `up` runs, never fewer than two available
    replicas nor more than three), and a new readiness Job, whose template is immutable:
    pulumi-kubernetes replaces it (delete first, as the program asks) and never updates it. The
    Deployment controller does not read the PodDisruptionBudget; the budget guards evictions
    (a node drain), which this step does not make."""
    with life.step("flag-change", after="no-changes"):
        engine = life.engine
        before = deployment(engine)
        old_job = api(engine, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}")
        engine.config_set("tpu-vllm:vllm.maxNumBatchedTokens", "2048", "--path")
        log = engine.work / "flag-up.events.jsonl"
        with RolloutWatch(engine) as watch:
            run = engine.up(events=log, timeout=1200).check()
            wait_rolled_out(engine)
        assert watch.samples > 0 and watch.min_available >= 2 and watch.max_pods <= 3, vars(watch)
        assert job_awaited(engine)
        ops = {(op, name) for kind, op, name in steps(events(log)) if kind == "done"}
        assert ("update", "vllm-deployment") in ops, (ops, run.output[-3000:])
        assert not any(name == "vllm-ready" and op == "update" for op, name in ops), ops
        assert any(name == "vllm-ready" and "replace" in op for op, name in ops), ops
        assert not any(kind == "failed" for kind, _, _ in steps(events(log)))
        after = deployment(engine)
        assert after["metadata"]["generation"] > before["metadata"]["generation"]
        wait_rolled_out(engine)
        args = json.dumps(after["spec"]["template"]["spec"]["containers"])
        assert "2048" in args
        # The old ReplicaSet was scaled to nothing; the new one holds every replica.
        sets = in_namespace(engine, "replicasets")
        assert sorted(s["status"].get("replicas", 0) for s in sets) == [0, 2], [
            (s["metadata"]["name"], s["status"]) for s in sets
        ]
        new_job = api(engine, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}")
        assert new_job["metadata"]["uid"] != old_job["metadata"]["uid"]
        assert new_job["status"].get("succeeded") == 1


def replica_policy(binding: bool = False) -> dict[str, Any]:
    meta = {"name": POLICY}
    if binding:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": meta,
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        }
    rule = {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["deployments"],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": "object.spec.replicas <= 2", "message": POLICY_MESSAGE}],
        },
    }


def test_a_deployment_the_server_refuses_fails_up_with_its_message(life: Lifecycle) -> None:
    """Bad input only the server can judge: up fails with the server's own words, and the
    Deployment that serves is left as it was."""
    with life.step("server-refusal", after="flag-change"):
        engine = life.engine
        plane = engine.fakes.plane
        policies = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
        bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
        for path, body in ((policies, replica_policy()), (bindings, replica_policy(True))):
            status, answer = plane.request("POST", path, body)
            assert status == 201, (status, answer.get("message"))
        # The policy takes effect once the API server has loaded it (asynchronously): wait for a
        # dry run of the change to be refused.
        before = deployment(engine)
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}?dryRun=All"
        meta = {k: v for k, v in before["metadata"].items() if k != "resourceVersion"}
        probe = {**before, "metadata": meta, "spec": {**before["spec"], "replicas": 3}}
        deadline = time.monotonic() + 60
        while True:
            status, answer = plane.request("PUT", path, probe)
            if status == 422 and POLICY_MESSAGE in str(answer.get("message")):
                break
            assert time.monotonic() < deadline, ("the policy never took effect", status, answer)
            time.sleep(0.5)
        engine.config_set("tpu-vllm:gke.replicas", "3", "--path")
        try:
            run = engine.up(timeout=1200)
            assert run.returncode != 0, run.output[-3000:]
            assert POLICY_MESSAGE in run.output, run.output[-3000:]
            after = deployment(engine)
            assert after["spec"]["replicas"] == before["spec"]["replicas"] == 2
            wait_rolled_out(engine)
        finally:
            plane.request("DELETE", f"{bindings}/{POLICY}")
            plane.request("DELETE", f"{policies}/{POLICY}")
            engine.config_set("tpu-vllm:gke.replicas", "2", "--path")
        # Without the policy and with the stack's own value, up succeeds again.
        engine.up(timeout=1200).check()
        wait_rolled_out(engine)


class Watch:
    """Reads the API server every `interval` seconds on a thread while a command runs (a
    context manager); subclasses say what one round reads."""

    interval = 0.1

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def round(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stop.is_set():
            self.round()
            time.sleep(self.interval)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


class RolloutWatch(Watch):
    """The Deployment's available replicas and its running pods, while an update runs."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.samples = 0
        self.min_available = 1 << 30
        self.max_pods = 0

    def round(self) -> None:
        status = deployment(self.engine).get("status") or {}
        self.min_available = min(self.min_available, status.get("availableReplicas", 0))
        self.max_pods = max(self.max_pods, len(server_pods(self.engine, running=True)))
        self.samples += 1


def test_a_namespace_set_to_restricted_stops_up_before_the_deployment_changes(
    life: Lifecycle,
) -> None:
    """Through the engine: someone sets the stack's namespace to enforce Pod
    Security "restricted", which the root TPU server cannot meet. The next `up` with new pods
    stops at the admission check (components/gke/pod_admission.py) with the reason and the fix,
    and the Deployment that serves is left as it was; relabelled, `up` goes through."""
    with life.step("pod-security", after="server-refusal"):
        engine = life.engine
        plane = engine.fakes.plane
        path = f"/api/v1/namespaces/{NAMESPACE}"

        def enforce(level: str) -> None:
            found = plane.get(path)
            found["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = level
            status, answer = plane.request("PUT", path, found)
            assert status == 200, answer.get("message")

        before = deployment(engine)
        enforce("restricted")
        engine.config_set("tpu-vllm:vllm.maxNumBatchedTokens", "1024", "--path")
        try:
            run = engine.up(timeout=1200)
            assert run.returncode != 0, run.output[-3000:]
            assert "enforces Pod Security 'restricted'" in run.output, run.output[-3000:]
            assert "kubectl label --overwrite namespace" in run.output
            after = deployment(engine)
            assert after["metadata"]["generation"] == before["metadata"]["generation"]
        finally:
            enforce("baseline")
        engine.up(timeout=1200).check()
        wait_rolled_out(engine)
        assert "1024" in json.dumps(deployment(engine)["spec"]["template"]["spec"]["containers"])


def server_pods(engine: Engine, *, running: bool = False) -> list[dict[str, Any]]:
    """The server's pods (not the Job's); `running`: only those not being deleted."""
    selector = "labelSelector=app.kubernetes.io/component=server"
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?{selector}"
    found = list(engine.fakes.plane.get(path)["items"])
    return [p for p in found if not running or not p["metadata"].get("deletionTimestamp")]


class DeleteWatch(Watch):
    """While `pulumi destroy` runs: when the server pods were last seen, and when each object
    they use was first seen gone."""

    interval = 0.05

    def __init__(self, engine: Engine, used: dict[str, str]) -> None:
        super().__init__(engine)
        self.used = used
        self.pods_seen_at = 0.0
        self.gone_at: dict[str, float] = {}

    def round(self) -> None:
        # Stamped before the pods are read and after an object is seen gone, so a pod seen and
        # an object gone in one round never count as "gone while a pod existed".
        before = time.monotonic()
        if server_pods(self.engine):
            self.pods_seen_at = before
        plane = self.engine.fakes.plane
        for name, path in self.used.items():
            if name not in self.gone_at and plane.request("GET", path)[0] == 404:
                self.gone_at[name] = time.monotonic()


def test_a_refresh_reads_back_without_waiting_for_a_load_balancer(life: Lifecycle) -> None:
    """No cloud controller gives the Service an address here, as none has while GKE programs
    the load balancer: the Service is not awaited on create, update or refresh (its
    `pulumi.com/skipAwait`), and the readiness Job stays the gate."""
    with life.step("refresh", after="no-changes"):
        engine = life.engine
        service = api(engine, f"/api/v1/namespaces/{NAMESPACE}/services/{k8s_manifests.SERVICE}")
        assert not (service.get("status", {}).get("loadBalancer") or {}).get("ingress")
        engine.pulumi("refresh", "--yes", timeout=600).check()
        engine.up("--expect-no-changes", timeout=1200).check()


def test_destroy_removes_the_pods_first_and_leaves_nothing(life: Lifecycle) -> None:
    """The pods' owner is deleted in the foreground and awaited (components/gke/pod_owner.py):
    the garbage collector removes the Deployment's pods first, so nothing they use (scripts,
    secret mounts, identity, grants, the class) goes while they run."""
    with life.step("destroy", after="up"):
        engine = life.engine
        mocked = run_program(STACK, {"tpu-vllm:gke.cluster": "shared"}, call=existing_cluster())
        used = used_by_the_server_pods(mocked)
        ns = f"/api/v1/namespaces/{NAMESPACE}"
        watched = {
            "vllm-ksa": f"{ns}/serviceaccounts/{k8s_manifests.KSA}",
            "vllm-compute-class": f"/apis/cloud.google.com/v1/computeclasses/{CLASS}",
            **{
                name: f"/apis/secrets-store.csi.x-k8s.io/v1/namespaces/{NAMESPACE}/"
                f"secretproviderclasses/{spc['metadata']['name']}"
                for name, spc in in_state_named(engine, "SecretProviderClass").items()
                if name in used
            },
            **{
                name: f"{ns}/configmaps/{cm['metadata']['name']}"
                for name, cm in in_state_named(engine, "ConfigMap").items()
                if name in used
            },
        }
        assert {"vllm-scripts", "vllm-server-secrets"} <= set(watched) <= used, sorted(watched)
        log = engine.work / "destroy.events.jsonl"
        with DeleteWatch(engine, watched) as watch:
            engine.pulumi("destroy", "--yes", "--event-log", str(log), timeout=1200).check()
            time.sleep(0.5)
        assert watch.pods_seen_at > 0, "no server pod was ever seen"
        assert set(watch.gone_at) == set(watched), watch.gone_at
        early = {n: round(watch.pods_seen_at - t, 2) for n, t in watch.gone_at.items()
                 if t < watch.pods_seen_at}  # fmt: skip
        assert early == {}, f"gone while a server pod still existed (seconds before): {early}"
        # The engine's order for what the API server cannot show: the Google grants.
        done = [name for kind, op, name in steps(events(log)) if kind == "done" and op == "delete"]
        for name in used & set(done):
            assert done.index("vllm-pods-owner") < done.index(name), (name, done)
        plane = engine.fakes.plane
        deadline = time.monotonic() + 60
        while plane.request("GET", ns)[0] != 404:
            assert time.monotonic() < deadline, "the namespace outlived the destroy"
            time.sleep(0.5)
        # Every kind the stack made, in every namespace (not only its own, which the namespace
        # controller has emptied): no object carrying the stack's label is left.
        mine = f"labelSelector=app.kubernetes.io/instance={NAMESPACE}"
        for plural, prefix in NAMESPACED.items():
            left = plane.get(f"{prefix}/{plural}?{mine}")["items"]
            assert left == [], (plural, [i["metadata"]["name"] for i in left])
        assert plane.get("/apis/cloud.google.com/v1/computeclasses")["items"] == []
        assert engine.resources() == [] or all(
            r["type"] in ("pulumi:pulumi:Stack", "pulumi:providers:pulumi-python")
            for r in engine.resources()
        )


def in_state_named(engine: Engine, kind: str) -> dict[str, dict[str, Any]]:
    """The state's Kubernetes objects of `kind`, by resource name, with their outputs."""
    return {
        str(r["urn"]).rsplit("::", 1)[-1]: r["outputs"]
        for r in engine.resources()
        if str(r["type"]).endswith(f":{kind}") and str(r["type"]).startswith("kubernetes:")
    }


def test_an_early_compute_class_crd_is_refused_before_any_object(life: Lifecycle) -> None:
    """The pre-flight of the served CRD (components/gke/crd_schema.py) against a real server
    serving the early ComputeClass schema: up stops at the CRD wait, with the fix, and the
    cluster holds no object of the stack."""
    with life.step("early-crd", after="destroy"):
        engine = life.engine
        plane = engine.fakes.plane
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        plane.request("DELETE", f"{crds}/computeclasses.cloud.google.com")
        deadline = time.monotonic() + 60
        while plane.request("GET", f"{crds}/computeclasses.cloud.google.com")[0] != 404:
            assert time.monotonic() < deadline, "the ComputeClass CRD was not removed"
            time.sleep(0.5)
        plane.install_crd(compute_class_crd.crd(early=True))
        run = engine.up(timeout=1200)
        assert run.returncode != 0, run.output[-3000:]
        assert "older than the class the stack sends" in run.output, run.output[-3000:]
        assert "spec.priorities[].location" in run.output
        assert compute_class_crd.FLEX_TPU_RULE["message"] in run.output, run.output[-3000:]
        assert "gcloud container clusters upgrade" in run.output
        assert plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}")[0] == 404
        assert plane.get("/apis/cloud.google.com/v1/computeclasses")["items"] == []
        # The state agrees: no Kubernetes object was recorded (the provider itself may be).
        made = [r["urn"] for r in engine.resources() if r["type"].startswith("kubernetes:")]
        assert made == [], made
        engine.pulumi("destroy", "--yes", timeout=1200).check()
