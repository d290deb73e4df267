"""PodAdmission: at `pulumi up`, before the Deployment or the Job changes, ask the cluster
whether it would admit their pods.

Admission judges pods, not Deployments: a namespace that refuses the server's pods would show
only a FailedCreate event on the ReplicaSet, and the readiness Job would wait out its deadline.
A server-side dry run of each pod is refused at once, and the refusal quoted with the fix. Why
and how: docs/gke.md "What the pods need of a node and a namespace".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.engine_values import whole_numbers
from components.gke import pod_security
from components.gke.cluster_check import ClusterCheckProvider
from components.gke.kube_api import (
    KubeApi,
    KubeApiError,
    Throttled,
    Unreachable,
    parse_kubeconfig,
    status_message,
)
from components.gke.progress import report

#: A new cluster's control plane restarts while it resizes.
TIMEOUT_SECONDS = 300.0
POLL_SECONDS = 10.0


def _dry_run(api: KubeApi, namespace: str, pod: Mapping[str, Any]) -> tuple[int, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{pod['what']}-admission-",
            "namespace": namespace,
            "labels": dict(pod.get("labels") or {}),
            "annotations": dict(pod.get("annotations") or {}),
        },
        "spec": whole_numbers(pod["spec"]),
    }
    return api.post(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", body)


def _enforced(api: KubeApi, namespace: str) -> str:
    """Its enforced Pod Security level; "" when none or unreadable."""
    status, body = api.get(f"/api/v1/namespaces/{namespace}")
    if status != 200 or not isinstance(body, dict):
        return ""
    labels = body.get("metadata", {}).get("labels") or {}
    return str(labels.get(pod_security.ENFORCE_LABEL) or "")


def _refusal(namespace: str, what: str, message: str, enforced: str) -> str:
    if "PodSecurity" in message and enforced == pod_security.LEVEL:
        return (
            f"namespace {namespace} is labelled {pod_security.ENFORCE_LABEL}="
            f"{pod_security.LEVEL}, yet Pod Security refuses the {what} pods: {message}. Fix: "
            f"check the namespace's other pod-security.kubernetes.io labels (a pinned "
            f"enforce-version) with `kubectl get namespace {namespace} -o yaml`, and the "
            "cluster's Pod Security admission configuration, then `pulumi up` again; nothing "
            "was changed"
        )
    if "PodSecurity" in message:
        level = f"enforces Pod Security {enforced!r}" if enforced else "enforces Pod Security"
        return (
            f"namespace {namespace} {level}, which refuses the {what} pods: {message}. The "
            f"vLLM TPU server runs as root (the image's user), which only the "
            f"{pod_security.LEVEL!r} level allows; the stack labels its namespace so. Fix: "
            f"`kubectl label --overwrite namespace {namespace} "
            f"{pod_security.ENFORCE_LABEL}={pod_security.LEVEL}` (or have the cluster's "
            "policy exempt it), then `pulumi up` again; nothing was changed"
        )
    if "cannot create resource" in message:
        return (
            f"dry-running the {what} pods in namespace {namespace} was refused: {message}. "
            "Fix: your account needs container.pods.create on the cluster "
            "(roles/container.admin has it)"
        )
    return (
        f"namespace {namespace} refuses the {what} pods: {message}. Fix: the policy that "
        "refuses them (an admission webhook, a ValidatingAdmissionPolicy) must allow them; "
        "nothing was changed"
    )


def check_admission(props: Mapping[str, Any]) -> dict[str, Any]:
    """Raise with the reason and the fix when a pod is refused."""
    namespace = str(props["namespace"])
    timeout = float(props.get("timeout_seconds") or TIMEOUT_SECONDS)
    poll = float(props.get("poll_seconds") or POLL_SECONDS)
    api = KubeApi(parse_kubeconfig(str(props["kubeconfig"])))
    start = time.monotonic()
    qos: dict[str, str] = {}
    try:
        for pod in props.get("pods") or []:
            what = str(pod["what"])
            while True:
                try:
                    status, body = _dry_run(api, namespace, pod)
                    break
                except (Unreachable, Throttled) as error:
                    if time.monotonic() - start >= timeout:
                        raise Exception(
                            f"namespace {namespace}: the cluster's API did not judge the {what} "
                            f"pods within {timeout:.0f} s ({error}). Fix: check the cluster, "
                            "then `pulumi up` again"
                        ) from None
                    time.sleep(poll)
            if status not in (200, 201):
                message = status_message(body) or f"HTTP {status}"
                raise Exception(_refusal(namespace, what, message, _enforced(api, namespace)))
            qos[what] = str((body.get("status") or {}).get("qosClass") or "")
    except KubeApiError as error:
        raise Exception(f"namespace {namespace}: the pods cannot be judged: {error}.") from None
    classes = ", ".join(f"{what} {cls}" for what, cls in qos.items())
    report(f"namespace {namespace} admits the pods (QoS: {classes})")
    return {"qos": qos}


class PodAdmissionProvider(ClusterCheckProvider):
    watched = ("kubeconfig", "namespace", "pods")

    def run(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return check_admission(props)

    def resource_id(self, props: Mapping[str, Any]) -> str:
        return f"{props['namespace']}/admission"


def pod_of(what: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of `pods`."""
    meta = template.get("metadata") or {}
    return {
        "what": what,
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "spec": template["spec"],
    }


@dataclass(frozen=True, kw_only=True)
class PodAdmissionArgs:
    """The pods to dry-run in the namespace before anything changes."""

    kubeconfig: pulumi.Input[str]
    namespace: str
    pods: Sequence[Mapping[str, Any]]


class PodAdmission(dyn.Resource):
    """Done once the cluster would admit every pod in `pods` (`pod_of` entries)."""

    qos: pulumi.Output[dict[str, str]]

    def __init__(
        self, name: str, args: PodAdmissionArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            PodAdmissionProvider(),
            name,
            {
                "kubeconfig": args.kubeconfig,
                "namespace": args.namespace,
                "pods": list(args.pods),
                "timeout_seconds": TIMEOUT_SECONDS,
                "poll_seconds": POLL_SECONDS,
                "qos": None,
            },
            opts,
        )
