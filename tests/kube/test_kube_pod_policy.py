"""The pods against a real API server's admission and scheduler: Pod Security, QoS, and the
readiness Job's scheduling as `pulumi up` reports it.

The server is the Kubernetes layer's control plane (tests/support/kube_cluster.py: kube-apiserver
with its default admission plugins, PodSecurity among them, the scheduler, the controllers, kwok
nodes). The checks run as the program runs them: components/gke/pod_admission.py and
components/gke/readiness_watch.py with the kubeconfig the program builds
(components/gke/cluster.py `kubeconfig`) and a `gke-gcloud-auth-plugin` stand-in on PATH
(tests/support/fakes/kube_api.py) whose token the API server knows.
"""

from __future__ import annotations

import base64
import copy
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.gke import pod_admission, readiness_watch
from components.gke.cluster import kubeconfig
from tests.support import kube_cluster
from tests.support.fakes.kube_api import write_auth_plugin
from tests.support.gke_manifests import STACK, VARIANTS, manifests
from tests.support.pulumi_program import run_program

pytestmark = pytest.mark.kube

ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    run = run_program(STACK, VARIANTS[next(iter(VARIANTS))])
    return {
        o["kind"]: o
        for o in manifests(run)
        if o["kind"] in {"Namespace", "Deployment", "Job", "ServiceAccount"}
    }


class Plane:
    def __init__(self, cp: kube_cluster.ControlPlane, config: str) -> None:
        self.cp, self.kubeconfig = cp, config


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory, objects: dict[str, dict[str, Any]]
) -> Iterator[Plane]:
    work = tmp_path_factory.mktemp("kube")
    token = secrets.token_urlsafe(24)
    with kube_cluster.running(work, deployer_token=token) as cp, pytest.MonkeyPatch.context() as mp:
        plugin = work / "plugin"
        plugin.mkdir()
        write_auth_plugin(plugin, token)
        mp.setenv("PATH", f"{plugin}:{Path('/usr/bin')}:{Path('/bin')}")
        cp.add_node(kube_cluster.system_node("system-0"))
        cp.apply(objects["Namespace"])
        cp.apply(objects["ServiceAccount"])
        ca = base64.b64encode(cp.pki.ca.read_bytes()).decode()
        yield Plane(cp, kubeconfig("test", f"127.0.0.1:{cp.port}", ca))


def pods(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        pod_admission.pod_of("server", objects["Deployment"]["spec"]["template"]),
        pod_admission.pod_of("readiness", objects["Job"]["spec"]["template"]),
    ]


def props(plane: Plane, namespace: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kubeconfig": plane.kubeconfig,
        "namespace": namespace,
        "pods": pods,
        "timeout_seconds": 20,
        "poll_seconds": 1,
    }


def label(plane: Plane, namespace: str, level: str) -> None:
    path = f"/api/v1/namespaces/{namespace}"
    found = plane.cp.get(path)
    found["metadata"]["labels"][ENFORCE] = level
    status, body = plane.cp.request("PUT", path, found)
    assert status == 200, body


def test_the_stacks_namespace_admits_both_pods_as_burstable(
    plane: Plane, objects: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The namespace the stack makes says `enforce: baseline`; both pods pass it, and the API
    server gives them the QoS class their requests make (BestEffort before they had requests)."""
    namespace = objects["Namespace"]["metadata"]["name"]
    assert objects["Namespace"]["metadata"]["labels"][ENFORCE] == "baseline"
    found = pod_admission.check_admission(props(plane, namespace, pods(objects)))
    assert found == {"qos": {"server": "Burstable", "readiness": "Burstable"}}
    assert f"namespace {namespace} admits the pods" in capsys.readouterr().err


def test_a_restricted_namespace_is_refused_at_preflight_with_the_reason_and_the_fix(
    plane: Plane, objects: dict[str, dict[str, Any]]
) -> None:
    """Relabelled "restricted", the namespace refuses the server's pods. The server's
    message names only what a root TPU server cannot give (its user), not what the stack could
    have set (privilege escalation, seccomp, which it now sets); the readiness pod passes."""
    namespace = objects["Namespace"]["metadata"]["name"]
    label(plane, namespace, "restricted")
    try:
        with pytest.raises(Exception, match="enforces Pod Security 'restricted'") as refused:
            pod_admission.check_admission(props(plane, namespace, pods(objects)))
        said = str(refused.value)
        assert "runAsNonRoot" in said
        assert "allowPrivilegeEscalation" not in said
        assert "seccompProfile" not in said
        assert f"kubectl label --overwrite namespace {namespace} {ENFORCE}=baseline" in said
        readiness = pods(objects)[1:]
        assert pod_admission.check_admission(props(plane, namespace, readiness))["qos"] == {
            "readiness": "Burstable"
        }
    finally:
        label(plane, namespace, "baseline")


def job_copy(objects: dict[str, dict[str, Any]], name: str, **spec: Any) -> dict[str, Any]:
    job = copy.deepcopy(objects["Job"])
    job["metadata"] = {"name": name, "namespace": objects["Namespace"]["metadata"]["name"]}
    job["spec"].update(spec)
    return job


def watch_props(plane: Plane, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    template = job["spec"]["template"]["metadata"]["annotations"]
    return {
        "kubeconfig": plane.kubeconfig,
        "namespace": job["metadata"]["namespace"],
        "job": job["metadata"]["name"],
        "revision": template[readiness_watch.REVISION_ANNOTATION],
        "timeout_seconds": timeout,
        "poll_seconds": 0.5,
        "report_seconds": 60,
    }


def taint(plane: Plane, on: bool) -> None:
    path = "/api/v1/nodes/system-0"
    other = {"key": "dedicated", "value": "another-team", "effect": "NoSchedule"}
    for _ in range(20):
        node = plane.cp.get(path)
        rest = [t for t in node["spec"].get("taints") or [] if t != other]
        node["spec"]["taints"] = [*rest, other] if on else rest
        if plane.cp.request("PUT", path, node)[0] == 200:
            return
    raise AssertionError("20 conflicting writes to system-0")


def test_a_stuck_readiness_pod_says_why_at_once_then_where_it_landed(
    plane: Plane, objects: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The only node is tainted for another team, so the Job's pod cannot be placed.
    The watch reports the scheduler's own message within seconds, not at the deadline; once
    the taint goes, it says where the pod landed and is done."""
    taint(plane, on=True)
    job = job_copy(objects, "vllm-ready-stuck")
    found: dict[str, Any] = {}
    watcher = threading.Thread(
        target=lambda: found.update(readiness_watch.watch(watch_props(plane, job, 60)))
    )
    try:
        plane.cp.apply(job)
        watcher.start()
        deadline = time.monotonic() + 30
        said = ""
        while time.monotonic() < deadline and "Unschedulable" not in said:
            time.sleep(0.5)
            said += capsys.readouterr().err
        assert "not scheduled (Unschedulable): 0/1 nodes are available" in said, said
        assert "untolerated taint" in said
    finally:
        taint(plane, on=False)
    watcher.join(60)
    assert found["scheduled"].endswith("scheduled on node system-0"), found


def test_a_job_that_fails_unscheduled_fails_the_watch_with_the_schedulers_reason(
    plane: Plane, objects: dict[str, dict[str, Any]]
) -> None:
    """The Job's own failure says only DeadlineExceeded; the watch says why."""
    taint(plane, on=True)
    try:
        job = job_copy(objects, "vllm-ready-deadline", activeDeadlineSeconds=4)
        plane.cp.apply(job)
        with pytest.raises(Exception, match="never scheduled") as failed:
            readiness_watch.watch(watch_props(plane, job, 60))
        assert "untolerated taint" in str(failed.value)
    finally:
        taint(plane, on=False)


def test_a_job_that_never_appears_is_given_up_on_not_waited_out(
    plane: Plane, objects: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The Job's own create was refused (its step says why): the watch stops after its short
    bound instead of holding `pulumi up` for the Job's whole timeout."""
    job = job_copy(objects, "vllm-ready-never-made")
    props = {**watch_props(plane, job, 600), "appear_seconds": 2}
    start = time.monotonic()
    assert readiness_watch.watch(props) == {"scheduled": ""}
    assert time.monotonic() - start < 30
    assert "none of this revision after 2 s" in capsys.readouterr().err
