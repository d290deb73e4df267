"""The real control plane starts on 127.0.0.1, plays GKE-shaped TPU nodes, and stops cleanly.

It is the ground the GKE stack's real-server tests stand on: if the scheduler cannot
place a pod that tolerates the TPU taints on a kwok TPU node, or a Job's pod never completes, no
later step can say anything. Skips (fails under TPU_VLLM_REQUIRE_KUBE=1, as .ci/run sets) when
scripts/kube/build.sh has not run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import kube_cluster

pytestmark = pytest.mark.kube

COMPUTE_CLASS = "tpu-vllm-v6e4"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kube_cluster.ControlPlane]:
    with kube_cluster.running(tmp_path_factory.mktemp("kube")) as cp:
        print(f"control plane up in {cp.started_seconds:.1f} s")
        cp.add_node(kube_cluster.system_node("system-0"))
        cp.add_node(kube_cluster.tpu_node("tpu-0", COMPUTE_CLASS))
        yield cp


def _wait_pod(
    cp: kube_cluster.ControlPlane, name: str, phases: set[str], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        pod = cp.get(f"/api/v1/namespaces/default/pods/{name}")
        if pod.get("status", {}).get("phase") in phases:
            return pod
        time.sleep(0.3)
    raise AssertionError(f"pod {name} not in {phases}: {pod.get('status')}")


def _pod(name: str, *, tolerate: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "server",
                "image": "registry.invalid/x@sha256:" + "0" * 64,
                "resources": {"limits": {"google.com/tpu": "4"}},
            }
        ],
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
    }
    if tolerate:
        spec["tolerations"] = [
            {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "cloud.google.com/compute-class",
                "operator": "Equal",
                "value": COMPUTE_CLASS,
                "effect": "NoSchedule",
            },
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def test_tpu_node_is_ready_with_gke_labels_taints_and_chips(
    plane: kube_cluster.ControlPlane,
) -> None:
    node = plane.get("/api/v1/nodes/tpu-0")
    assert node["status"]["allocatable"]["google.com/tpu"] == "4"
    assert node["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert node["metadata"]["labels"]["cloud.google.com/compute-class"] == COMPUTE_CLASS
    assert {t["key"] for t in node["spec"]["taints"]} == {
        "google.com/tpu",
        "cloud.google.com/compute-class",
    }
    assert plane.started_seconds > 0


def test_scheduler_places_a_tolerating_tpu_pod_and_kwok_runs_it(
    plane: kube_cluster.ControlPlane,
) -> None:
    plane.apply(_pod("tpu-ok", tolerate=True))
    pod = _wait_pod(plane, "tpu-ok", {"Running"})
    assert pod["spec"]["nodeName"] == "tpu-0"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready.get("Ready") == "True"


def test_scheduler_refuses_a_pod_without_the_tpu_tolerations(
    plane: kube_cluster.ControlPlane,
) -> None:
    plane.apply(_pod("tpu-untolerated", tolerate=False))
    deadline = time.monotonic() + 30
    message = ""
    while time.monotonic() < deadline and "untolerated taint" not in message:
        pod = plane.get("/api/v1/namespaces/default/pods/tpu-untolerated")
        conditions = pod.get("status", {}).get("conditions", [])
        message = " ".join(c.get("message", "") for c in conditions if c["type"] == "PodScheduled")
        time.sleep(0.3)
    assert "untolerated taint" in message
    assert pod["status"]["phase"] == "Pending"


def test_job_pod_completes_through_the_job_controller(plane: kube_cluster.ControlPlane) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }
    status, body = plane.request("POST", "/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 201, body
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = plane.get("/apis/batch/v1/namespaces/default/jobs/probe").get("status", {})
        if done.get("succeeded") == 1:
            break
        time.sleep(0.3)
    assert done.get("succeeded") == 1, done


def test_stop_leaves_nothing_running(tmp_path: Path, plane: kube_cluster.ControlPlane) -> None:
    """Each component runs in its own process group; after stop() no process of any group is
    left, children included (killpg reaches them; /proc is read, not our own handles)."""
    second = kube_cluster.ControlPlane(tmp_path, bin_dir=plane.bin).start()
    try:
        groups = {proc.pid for proc in second.procs.values()}
        assert set(second.running()) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        assert _processes_in(groups)
    finally:
        second.stop()
    assert _processes_in(groups) == []


def _processes_in(groups: set[int]) -> list[str]:
    """Live (not zombie) processes whose process group is one of `groups`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp in groups and state != "Z":
            found.append(text.split(" ", 1)[0])
    return found
