"""ReadinessWatch: while `pulumi up` waits on the readiness Job, say where its pod stands.

pulumi-kubernetes' Job await drops the scheduler's Status-level messages, so a Job with nowhere
to run said nothing until its deadline. This watch runs beside the Job, reports its pod's
`PodScheduled` condition, and fails with the scheduler's reason when the Job fails unplaced.
Why and how: docs/gke.md "Readiness".
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.gke.cluster_check import ClusterCheckProvider
from components.gke.kube_api import (
    KubeApi,
    KubeApiError,
    Throttled,
    Unreachable,
    parse_kubeconfig,
)
from components.gke.progress import minutes, report

REVISION_ANNOTATION = "tpu-vllm/server-revision"
POLL_SECONDS = 5.0
REPORT_SECONDS = 60.0
#: A Job never seen was refused or never made (its step says why); waiting would hold `pulumi up`.
APPEAR_SECONDS = 300.0


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return {}


def _ours(obj: Mapping[str, Any], revision: str) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(REVISION_ANNOTATION) == revision


def _job_state(api: KubeApi, namespace: str, job: str, revision: str) -> str:
    """ "" while the Job of `revision` runs (or is not made yet), else "Complete" or "Failed"."""
    status, body = api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
    if status != 200 or not isinstance(body, dict):
        return ""
    template = (body.get("spec") or {}).get("template") or {}
    if not _ours(template, revision):
        return ""
    for kind in ("Complete", "Failed"):
        if _condition(body, kind).get("status") == "True":
            return kind
    return "Running"


def _pods(api: KubeApi, namespace: str, job: str, revision: str) -> list[Mapping[str, Any]]:
    # On every Job's pods, beside `batch.kubernetes.io/job-name` (`LegacyJobNameLabel`).
    selector = urllib.parse.quote(f"job-name={job}")
    status, body = api.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    if status != 200 or not isinstance(body, dict):
        return []
    return [p for p in body.get("items") or [] if _ours(p, revision)]


def _where(pod: Mapping[str, Any]) -> tuple[bool, str]:
    name = (pod.get("metadata") or {}).get("name", "?")
    scheduled = _condition(pod, "PodScheduled")
    node = (pod.get("spec") or {}).get("nodeName")
    if scheduled.get("status") == "True" or node:
        return True, f"readiness pod {name} scheduled on node {node}"
    if not scheduled:
        return False, f"readiness pod {name} waits for the scheduler"
    reason = scheduled.get("reason") or "not scheduled"
    return False, f"readiness pod {name} not scheduled ({reason}): {scheduled.get('message', '')}"


def watch(props: Mapping[str, Any]) -> dict[str, Any]:
    namespace, job = str(props["namespace"]), str(props["job"])
    revision = str(props["revision"])
    timeout = float(props["timeout_seconds"])
    poll = float(props.get("poll_seconds") or POLL_SECONDS)
    every = float(props.get("report_seconds") or REPORT_SECONDS)
    api = KubeApi(parse_kubeconfig(str(props["kubeconfig"])))
    start = time.monotonic()
    said, said_at, last_unscheduled = "", 0.0, ""
    seen = False
    appear = float(props.get("appear_seconds") or APPEAR_SECONDS)
    while time.monotonic() - start < timeout:
        try:
            state = _job_state(api, namespace, job, revision)
            pods = _pods(api, namespace, job, revision)
        except (Unreachable, Throttled) as error:
            state, pods = "", []
            line = f"readiness Job {job}: the cluster's API did not answer ({error})"
        except KubeApiError as error:
            report(f"readiness Job {job}: cannot be watched ({error}); the Job itself is awaited")
            return {"scheduled": ""}
        else:
            placed = [_where(p) for p in pods]
            if any(done for done, _ in placed):
                line = next(text for done, text in placed if done)
                report(f"{line}, after {minutes(time.monotonic() - start)}")
                return {"scheduled": line}
            line = "; ".join(text for _, text in placed) or f"readiness Job {job}: no pod yet"
            if placed:
                last_unscheduled = line
        seen = seen or bool(state or pods)
        if not seen and time.monotonic() - start >= appear:
            report(
                f"readiness Job {job}: none of this revision after {minutes(appear)}; not watched"
            )
            return {"scheduled": ""}
        if state == "Complete":
            return {"scheduled": ""}
        if state == "Failed":
            if last_unscheduled:
                raise Exception(
                    f"the readiness Job failed and its pod was never scheduled: "
                    f"{last_unscheduled}. Fix: give the cluster a node the pod may use (it "
                    "tolerates the TPU and class taints and asks 50m CPU and 64 MiB), or lift "
                    "what the message names, then `pulumi up` again"
                )
            return {"scheduled": ""}
        now = time.monotonic()
        if line != said or now - said_at >= every:
            report(f"{line} ({minutes(now - start)})")
            said, said_at = line, now
        time.sleep(poll)
    return {"scheduled": ""}


class ReadinessWatchProvider(ClusterCheckProvider):
    """Also watches again after a watch that never saw the pod placed: the next `up` replaces
    a failed Job of the same revision (`pulumi.com/replaceUnready`)."""

    watched = ("kubeconfig", "namespace", "job", "revision")

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        if not olds.get("scheduled"):
            return dyn.DiffResult(changes=True)
        return super().diff(_id, olds, news)

    def run(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return watch(props)

    def resource_id(self, props: Mapping[str, Any]) -> str:
        return f"{props['namespace']}/{props['job']}"


@dataclass(frozen=True, kw_only=True)
class ReadinessWatchArgs:
    """The readiness Job to watch, at which revision, and for how long."""

    kubeconfig: pulumi.Input[str]
    namespace: str
    job: str
    revision: pulumi.Input[str]
    timeout_seconds: int


class ReadinessWatch(dyn.Resource):
    """Reports the Job's pod's scheduling until it is placed or the Job ends."""

    scheduled: pulumi.Output[str]

    def __init__(
        self, name: str, args: ReadinessWatchArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            ReadinessWatchProvider(),
            name,
            {
                "kubeconfig": args.kubeconfig,
                "namespace": args.namespace,
                "job": args.job,
                "revision": args.revision,
                "timeout_seconds": args.timeout_seconds,
                "poll_seconds": POLL_SECONDS,
                "report_seconds": REPORT_SECONDS,
                "scheduled": None,
            },
            opts,
        )
