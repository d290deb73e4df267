"""What the GKE server pods use while they run, read from the manifests the program renders
under mocks: what `pulumi destroy` must keep until the pods are gone
(tests/mocked/test_gke_destroy_order.py, tests/engine/test_kube_engine_gke.py).
"""

from __future__ import annotations

from tests.support.pulumi_program import ProgramRun, Registered

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLASS_LABEL = "cloud.google.com/compute-class"


def kind(resource: Registered) -> str:
    return resource.type.rsplit(":", 1)[-1] if resource.type.startswith("kubernetes:") else ""


def used_by_the_server_pods(run: ProgramRun) -> set[str]:
    """What the server pods need while they run, read from the manifests: their class, KSA,
    ConfigMaps, SecretProviderClasses, the Role they read their status with, and the Google
    grants that give their Workload Identity its access."""
    [pod] = [run.one(DEPLOYMENT).inputs["spec"]["template"]["spec"]]
    ns = run.one(DEPLOYMENT).inputs["metadata"]["namespace"]
    ksa = pod["serviceAccountName"]
    maps = {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
    spcs = {
        v["csi"]["volumeAttributes"]["secretProviderClass"] for v in pod["volumes"] if "csi" in v
    }
    [account] = [r for r in run.resources if kind(r) == "ServiceAccount"]
    gsa = account.inputs["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    pod_roles = {
        r.inputs["metadata"]["name"]
        for r in run.resources
        if kind(r) == "Role" and any("pods" in rule["resources"] for rule in r.inputs["rules"])
    }
    used: set[str] = set()
    for r in run.resources:
        name = (r.inputs.get("metadata") or {}).get("name")
        member = str(r.inputs.get("member", ""))
        if (
            (kind(r) == "ComputeClass" and name == pod["nodeSelector"][CLASS_LABEL])
            or (kind(r) == "ServiceAccount" and name == ksa)
            or (kind(r) == "ConfigMap" and name in maps)
            or (kind(r) == "SecretProviderClass" and name in spcs)
            or (kind(r) in ("Role", "RoleBinding") and name in pod_roles)
            or member.endswith(f"[{ns}/{ksa}]")  # the Workload Identity binding
            or (r.type.startswith("gcp:") and member == f"serviceAccount:{gsa}")  # the grants
        ):
            used.add(r.name)
    return used
