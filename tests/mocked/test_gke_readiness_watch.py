"""When the readiness watch runs again (components/gke/readiness_watch.py), without a cluster.

Its reports against a real API server and scheduler: tests/kube/test_kube_pod_policy.py.
"""

from __future__ import annotations

from components.gke.readiness_watch import ReadinessWatchProvider

OLD = {"kubeconfig": "k", "namespace": "ns", "job": "vllm-ready", "revision": "r1"}


def test_a_new_revision_is_watched_again_and_an_unchanged_one_is_not() -> None:
    provider = ReadinessWatchProvider()
    placed = {**OLD, "scheduled": "readiness pod vllm-ready-x scheduled on node n"}
    assert provider.diff("id", placed, {**OLD, "revision": "r2"}).changes
    assert not provider.diff("id", placed, dict(OLD)).changes


def test_a_watch_that_never_saw_the_pod_placed_runs_again_on_the_next_up() -> None:
    """pulumi-kubernetes replaces a failed Job of the same revision (`replaceUnready`) on the
    next `up`; its pod is worth watching, so a watch that ended without seeing a pod placed
    reports a change even when nothing else did."""
    provider = ReadinessWatchProvider()
    assert provider.diff("id", {**OLD, "scheduled": ""}, dict(OLD)).changes
