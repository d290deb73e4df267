"""ServedCrds: wait, at `pulumi up`, until the cluster serves the CRDs the stack's objects need.

GKE installs the ComputeClass, SecretProviderClass and PodMonitoring CRDs itself, the first up
to an hour after a new cluster, while pulumi-kubernetes gives up on a kind it cannot find after
about a minute. Reading the CRD (not API discovery) also gives its schema, checked against the
class the stack sends (crd_schema.py). Why and how: docs/gke.md "The CRDs a new cluster may
lack", "How the program reads the cluster".
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.gke import crd_schema
from components.gke.cluster_check import ClusterCheckProvider
from components.gke.kube_api import (
    KubeApi,
    KubeApiError,
    Throttled,
    Unreachable,
    parse_kubeconfig,
)
from components.gke.kube_api import status_message as _status_message
from components.gke.progress import minutes, report

COMPUTE_CLASS_CRD = "computeclasses.cloud.google.com"
SECRET_PROVIDER_CLASS_CRD = "secretproviderclasses.secrets-store.csi.x-k8s.io"  # noqa: S105
#: Waited for only when the stack creates a PodMonitoring.
POD_MONITORING_CRD = "podmonitorings.monitoring.googleapis.com"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
CRD_WAIT_TIMEOUT_SECONDS = 3600
POLL_SECONDS = 15.0
REPORT_SECONDS = 60.0
#: What installs each CRD, and the fix when it never comes ({name}, {location}: the cluster's).
INSTALLERS: Mapping[str, tuple[str, str]] = {
    COMPUTE_CLASS_CRD: (
        "GKE's cluster autoscaler component installs it, which on a new cluster can take up to "
        "an hour (google/skills gke-compute-classes)",
        "check with `kubectl get crd {crd}` and run `pulumi up` again once it is listed (the "
        "cluster is kept); if it never is, the cluster's autoscaler does not serve "
        "ComputeClasses: name a GKE Standard cluster of 1.33.3-gke.1136000 or later in "
        "tpu-vllm:gke.cluster",
    ),
    SECRET_PROVIDER_CLASS_CRD: (
        "GKE's Secret Manager add-on installs it with the Secrets Store CSI driver",
        "check the add-on (`gcloud container clusters describe {name} --location {location} "
        "--format='value(secretManagerConfig.enabled)'`), enable it with `gcloud container "
        "clusters update {name} --location {location} --enable-secret-manager`, and run "
        "`pulumi up` again once `kubectl get crd {crd}` lists it",
    ),
    POD_MONITORING_CRD: (
        "GKE installs it with Managed Service for Prometheus' managed collection",
        "check managed collection (`gcloud container clusters describe {name} --location "
        "{location} --format='value(monitoringConfig.managedPrometheusConfig.enabled)'`), "
        "enable it with `gcloud container clusters update {name} --location {location} "
        "--enable-managed-prometheus`, or set tpu-vllm:monitoring.enabled to false, and run "
        "`pulumi up` again once `kubectl get crd {crd}` lists it",
    ),
}


def _pause(seconds: float) -> None:
    """One place, so a test can see how long the wait asked for."""
    time.sleep(seconds)


def _delays(cap: float) -> Iterator[float]:
    delay = min(2.0, cap)
    while True:
        yield delay
        delay = min(delay * 2, cap)


def _cluster_parts(cluster: str) -> tuple[str, str]:
    """(name, location) of `projects/P/locations/L/clusters/N`."""
    parts = cluster.split("/")
    return (parts[5], parts[3]) if len(parts) == 6 else (cluster, "LOCATION")


def _look(api: KubeApi, name: str, version: str) -> tuple[str | None, Mapping[str, Any]]:
    """(None, the CRD) once it is established and serves `version`; else (why not, {})."""
    try:
        status, body = api.get(CRD_PATH + name)
    except Unreachable as error:
        return f"the cluster's API did not answer ({error})", {}
    if status == 404:
        return "not installed yet", {}
    if status == 403:
        raise KubeApiError(
            f"reading the CRD {name} was refused ({_status_message(body)}). Fix: your account "
            "needs container.customResourceDefinitions.get on the cluster (roles/container.admin "
            "has it)"
        )
    if status == 401:
        raise KubeApiError(
            f"the cluster refused the credentials gke-gcloud-auth-plugin gave (401 for {name}, "
            f"twice). Fix: `gcloud auth login`, and check your access to the cluster"
        )
    if status != 200 or not isinstance(body, Mapping):
        raise KubeApiError(f"GET {CRD_PATH}{name} answered {status}: {_status_message(body)}")
    if not crd_schema.is_established(body):
        return f"installed, not established yet ({crd_schema.pending_reason(body)})", {}
    if crd_schema.served_version(body, version) is None:
        group = str((body.get("spec") or {}).get("group") or "")
        raise KubeApiError(
            f"the CRD {name} is established but does not serve {group}/{version}, which the "
            "stack's objects use. Fix: upgrade the cluster (`gcloud container clusters upgrade "
            "--master`)"
        )
    return None, body


def _not_served(cluster: str, name: str, why: str, timeout: float) -> str:
    installer, fix = INSTALLERS.get(name, ("", "check with `kubectl get crd {crd}`"))
    short, location = _cluster_parts(cluster)
    return (
        f"{cluster}: the CRD {name} was not served within {minutes(timeout)} (last: {why}). "
        f"{installer}; pulumi-kubernetes alone would give up on the objects of that kind after "
        "about a minute. Nothing that bills TPU time was created. Fix: "
        + fix.format(crd=name, name=short, location=location)
        + "."
    )


def _schema_problems(cluster: str, crd: Mapping[str, Any], version: str, spec: Any) -> str | None:
    """Why the served ComputeClass schema cannot carry the stack's class, or None."""
    if not isinstance(spec, Mapping):
        return None
    served = crd_schema.served_version(crd, version) or {}
    schema = crd_schema.spec_schema(served)
    dropped = crd_schema.undeclared_fields(schema, spec)
    refused = crd_schema.priority_refusals(schema, spec.get("priorities") or [])
    if not dropped and not refused:
        return None
    what = []
    if dropped:
        what.append(
            f"its schema has no {', '.join(dropped)}, so the API server would drop them "
            "(pulumi-kubernetes applies with fieldValidation Warn) and the TPU nodes would "
            "ignore tpu.zones, renewal.lead or tpu.maxRunDuration"
        )
    if refused:
        what.append(f"it refuses the class's flex-start TPU priority ({'; '.join(refused)})")
    short, location = _cluster_parts(cluster)
    return (
        f"{cluster}: the cluster's ComputeClass CRD ({COMPUTE_CLASS_CRD}) is older than the "
        f"class the stack sends: {'; and '.join(what)}. Early ComputeClass schemas lacked "
        "priorities[].location and refused flex-start with TPUs (datreeio/CRDs-catalog, "
        "cloud.google.com/computeclass_v1.json history). Fix: upgrade the control plane "
        f"(`gcloud container clusters upgrade {short} --location {location} --master`), whose "
        "new version brings GKE's newer CRD, and run `pulumi up` again."
    )


def wait_for_crds(props: Mapping[str, Any]) -> dict[str, Any]:
    """Poll until every CRD in `props["crds"]` is served, then check the ComputeClass schema."""
    cluster = str(props.get("cluster") or "the cluster")
    wanted = {str(c["name"]): str(c["version"]) for c in props.get("crds") or []}
    timeout = float(props.get("timeout_seconds") or CRD_WAIT_TIMEOUT_SECONDS)
    every = float(props.get("report_seconds") or REPORT_SECONDS)
    delays = _delays(float(props.get("poll_seconds") or POLL_SECONDS))
    api = KubeApi(parse_kubeconfig(str(props["kubeconfig"])))
    start = time.monotonic()
    next_report = start
    served: dict[str, Mapping[str, Any]] = {}
    try:
        while True:
            waiting: dict[str, str] = {}
            throttled: Throttled | None = None
            for name, version in wanted.items():
                if name in served:
                    continue
                if throttled is not None:  # asked to slow down: ask nothing more this round
                    waiting[name] = f"not asked: the cluster's API asked to wait ({throttled})"
                    continue
                try:
                    why, crd = _look(api, name, version)
                except Throttled as error:
                    # Not a refusal: wait at least its Retry-After, as client-go does.
                    throttled, why, crd = error, f"the cluster's API asked to wait ({error})", {}
                if why is None:
                    served[name] = crd
                else:
                    waiting[name] = why
            elapsed = time.monotonic() - start
            if not waiting:
                break
            if elapsed >= timeout:
                name, why = next(iter(waiting.items()))
                raise Exception(_not_served(cluster, name, why, timeout))
            if time.monotonic() >= next_report:
                lines = "; ".join(f"{n}: {w}" for n, w in waiting.items())
                report(
                    f"{cluster}: waiting for CRDs, {minutes(elapsed)} of at most "
                    f"{minutes(timeout)} ({lines})"
                )
                next_report = time.monotonic() + every
            hold = (throttled.retry_after or 0.0) if throttled else 0.0
            _pause(min(max(next(delays), hold), max(timeout - elapsed, 0.0)))
    except KubeApiError as error:
        raise Exception(f"{cluster}: the stack's CRDs cannot be read: {error}.") from None
    if COMPUTE_CLASS_CRD in served:
        problem = _schema_problems(
            cluster,
            served[COMPUTE_CLASS_CRD],
            wanted[COMPUTE_CLASS_CRD],
            props.get("compute_class_spec"),
        )
        if problem:
            raise Exception(problem)
    waited = time.monotonic() - start
    report(f"{cluster}: CRDs served after {minutes(waited)}: {', '.join(sorted(wanted))}")
    return {"served": dict(wanted), "waited_seconds": round(waited, 1)}


class ServedCrdsProvider(ClusterCheckProvider):
    watched = ("kubeconfig", "crds", "compute_class_spec")

    def run(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return wait_for_crds(props)

    def resource_id(self, props: Mapping[str, Any]) -> str:
        return f"{props.get('cluster')}/crds"


@dataclass(frozen=True, kw_only=True)
class ServedCrdsArgs:
    """The cluster, the (name, version) CRDs it must serve, and the ComputeClass to dry-run."""

    kubeconfig: pulumi.Input[str]
    cluster: pulumi.Input[str]
    crds: Sequence[tuple[str, str]]
    compute_class_spec: Mapping[str, Any]
    timeout_seconds: float = CRD_WAIT_TIMEOUT_SECONDS
    poll_seconds: float = POLL_SECONDS


class ServedCrds(dyn.Resource):
    """Done once the cluster serves every (name, version) in `crds`."""

    served: pulumi.Output[dict[str, str]]

    def __init__(
        self, name: str, args: ServedCrdsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            ServedCrdsProvider(),
            name,
            {
                "kubeconfig": args.kubeconfig,
                "cluster": args.cluster,
                "crds": [{"name": n, "version": v} for n, v in args.crds],
                "compute_class_spec": dict(args.compute_class_spec),
                "timeout_seconds": args.timeout_seconds,
                "poll_seconds": args.poll_seconds,
                "served": None,
                "waited_seconds": None,
            },
            opts,
        )
