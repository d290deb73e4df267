"""Every Kubernetes object the GKE backend sends, validated offline against Kubernetes' own
OpenAPI schema (kubernetes-validate, which bundles the JSON schemas generated from it).

Strict mode: an unknown field fails, as `kubectl apply --validate=strict` would. Versions: 1.33,
the oldest GKE that runs flex-start TPUs, and the newest schema the library bundles.
The SecretProviderClass is a CRD of the Secrets Store CSI driver, which no Kubernetes schema
contains: its metadata is validated against ObjectMeta from the same bundle, and its spec by
the assertions in tests/test_gke_backend.py.

GKE's ComputeClass is a CRD too, installed by GKE itself; no schema of it ships in any package
here. `COMPUTE_CLASS_SCHEMA` below transcribes, for the fields this program sends, the CRD's
OpenAPI schema as datreeio/CRDs-catalog publishes it from GKE clusters
(cloud.google.com/computeclass_v1.json at commit 77e49833da1a723ff2f1ec34251c5eafc8c75daa, after
"Update computeclasses.cloud.google.com schema from GKE 1.33"): types, bounds, required fields,
`additionalProperties: false` at every level we use, and the CEL rules
(`x-kubernetes-validations`) of a priority that concern our fields. Fields we never send are
allowed without constraint, so the schema stays strict about what we send without claiming to
be the whole CRD.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from components import catalog
from tests.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
VERSIONS = ["1.33.0", kubernetes_validate.latest_version()]
CRDS = {"SecretProviderClass", "ComputeClass", "PodMonitoring"}
CRD_API_VERSIONS = {
    "SecretProviderClass": "secrets-store.csi.x-k8s.io/v1",
    "ComputeClass": "cloud.google.com/v1",
    "PodMonitoring": "monitoring.googleapis.com/v1",
}

ANY: dict[str, Any] = {}  # a CRD field this program never sends: not constrained here
_PRIORITY: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "properties": {
        "flexStart": {
            "type": "object",
            "additionalProperties": False,
            "required": ["enabled"],
            "properties": {
                "enabled": {"type": "boolean"},
                "nodeRecycling": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["leadTimeSeconds"],
                    "properties": {
                        "leadTimeSeconds": {"type": "integer", "minimum": 1, "maximum": 604800}
                    },
                },
            },
        },
        "maxRunDurationSeconds": {"type": "integer"},
        "machineType": {"type": "string", "maxLength": 100},
        "spot": {"type": "boolean"},
        "tpu": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "count": {"type": "integer"},
                "topology": {"type": "string"},
                "type": {"type": "string"},
            },
        },
        "location": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "locationPolicy": {"enum": ["ANY", "BALANCED"]},
                "zoneTypes": ANY,
                "zones": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        **{
            name: ANY
            for name in (
                "acceleratorNetworkProfile",
                "capacityCheckWaitTimeSeconds",
                "gpu",
                "machineFamily",
                "maxPodsPerNode",
                "minCores",
                "minCpuPlatform",
                "minMemoryGb",
                "nodeLabels",
                "nodeSystemConfig",
                "nodepools",
                "placement",
                "podFamily",
                "priorityScore",
                "reservations",
                "storage",
                "taints",
            )
        },
    },
}
COMPUTE_CLASS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "cloud.google.com/v1"},
        "kind": {"const": "ComputeClass"},
        "metadata": {"type": "object"},  # ObjectMeta: `test_crd_metadata_is_valid_object_meta`
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "nodePoolAutoCreation": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["enabled"],
                    "properties": {"enabled": {"type": "boolean"}},
                },
                "whenUnsatisfiable": {"enum": ["ScaleUpAnyway", "DoNotScaleUp"]},
                "priorities": {"type": "array", "maxItems": 1000, "items": _PRIORITY},
                **{
                    name: ANY
                    for name in (
                        "activeMigration",
                        "autopilot",
                        "autoscalingPolicy",
                        "description",
                        "nodePoolConfig",
                        "nodePoolGroup",
                        "priorityDefaults",
                    )
                },
            },
        },
    },
}


def priority_rule_violations(priority: dict[str, Any]) -> list[str]:
    """The CRD's CEL rules on a priority (`x-kubernetes-validations`) that touch our fields,
    with the API server's messages."""
    found = []
    if "nodepools" in priority and len(priority) != 1:
        found.append("Nodepool field cannot be set along with other fields")
    if "machineFamily" in priority and "machineType" in priority:
        found.append("MachineFamily and MachineType cannot be set together")
    if "machineType" in priority and ({"minCores", "minMemoryGb"} & set(priority)):
        found.append("MachineType cannot be set together with MinCores/MinMemoryGb")
    if priority.get("spot") is True and priority.get("flexStart", {}).get("enabled") is True:
        found.append("Flex Start provisioning model is incompatible with Spot")
    return found


def compute_class_problems(manifest: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(COMPUTE_CLASS_SCHEMA)
    problems = [error.message for error in validator.iter_errors(manifest)]
    for priority in manifest.get("spec", {}).get("priorities", []):
        if isinstance(priority, dict):
            problems += priority_rule_violations(priority)
    return problems


VARIANTS: dict[str, dict[str, Any]] = {
    "stack-file": {},
    "spot-one-zone": {
        "tpu-vllm:tpu.provisioning": "spot",
        "tpu-vllm:tpu.maxRunDuration": None,
        "tpu-vllm:tpu.zones": ["us-east5-b"],
    },
    "cache-off": {"tpu-vllm:cache.enabled": False},
    "port-and-extra-args": {
        "tpu-vllm:vllm.port": 8080,
        "tpu-vllm:vllm.extraArgs": ["--disable-log-requests"],
        "tpu-vllm:gke.replicas": 5,
    },
}


def plain(value: Any) -> Any:
    """Numbers cross the Pulumi engine as floats (`2` -> `2.0`); the API gets integers."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def manifests(run: ProgramRun) -> list[dict[str, Any]]:
    found = [plain(r.inputs) for r in run.resources if r.type.startswith("kubernetes:")]
    assert found, "no Kubernetes objects registered"
    return found


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request: pytest.FixtureRequest) -> ProgramRun:
    return run_program(STACK, VARIANTS[request.param])


def test_the_backend_sends_the_objects_it_should(run: ProgramRun) -> None:
    kinds = sorted(m["kind"] for m in manifests(run))
    # The pod-reader Role and its binding come with the compile cache (the image digest).
    cache = ["Role", "RoleBinding"] if kinds.count("Role") == 2 else []
    assert kinds == sorted(
        [
            "ComputeClass",
            "ConfigMap",
            "ConfigMap",  # the pods' owner (components/gke/pod_owner.py)
            "Deployment",
            "PodDisruptionBudget",
            "Job",
            "Namespace",
            "SecretProviderClass",
            "SecretProviderClass",
            "Service",
            "ServiceAccount",
            # The readiness Job's right to read the Deployment's rollout.
            "Role",
            "RoleBinding",
            *cache,
            "PodMonitoring",  # every variant monitors, on a created cluster
        ]
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_every_core_object_is_valid_against_the_kubernetes_schema(
    run: ProgramRun, version: str
) -> None:
    checked = 0
    for manifest in manifests(run):
        if manifest["kind"] in CRDS:
            continue
        kubernetes_validate.validate(manifest, version, strict=True)
        checked += 1
    # two SecretProviderClasses, one ComputeClass, the PodMonitoring (with monitoring on)
    crds = sum(1 for m in manifests(run) if m["kind"] in CRDS)
    assert crds in (3, 4)
    assert checked == len(manifests(run)) - crds


def test_crd_metadata_is_valid_object_meta(run: ProgramRun) -> None:
    version = VERSIONS[0].rsplit(".", 1)[0] + ".0"
    bundle = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    strict = bundle / f"v{version}-local-strict"
    definitions = json.loads((strict / "_definitions.json").read_text())
    meta_schema = {
        "$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "$defs": definitions["$defs"],
    }
    validator = jsonschema.Draft202012Validator(meta_schema)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"name": "x", "labels": ["not", "a", "map"]})  # it can fail
    for manifest in manifests(run):
        if manifest["kind"] in CRDS:
            validator.validate(manifest["metadata"])
            assert manifest["apiVersion"] == CRD_API_VERSIONS[manifest["kind"]]
            assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}


def test_the_compute_class_fits_the_gke_crd_schema(run: ProgramRun) -> None:
    [manifest] = [m for m in manifests(run) if m["kind"] == "ComputeClass"]
    assert compute_class_problems(manifest) == []
    [priority] = manifest["spec"]["priorities"]
    if "flexStart" in priority:  # the replacement is sought before the run ends
        lead = priority["flexStart"]["nodeRecycling"]["leadTimeSeconds"]
        assert lead < priority["maxRunDurationSeconds"]


def _with(manifest: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed: dict[str, Any] = json.loads(json.dumps(manifest))
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "priorities", 0, "flexStart", "nodeRecycling", "leadTimeSeconds"), 0),
        (("spec", "priorities", 0, "flexStart", "nodeRecycling", "leadTimeSeconds"), "3600"),
        (("spec", "priorities", 0, "flexStart", "nodeRecycling", "leadTime"), 3600),
        (("spec", "priorities", 0, "flexStart", "enabled"), None),
        (("spec", "priorities", 0, "maxRunDuration"), "14400s"),
        (("spec", "priorities", 0, "spot"), True),
        (("spec", "priorities", 0, "nodepools"), ["tpu-pool"]),
        (("spec", "priorities", 0, "location", "zones"), []),
        (("spec", "whenUnsatisfiable"), "Wait"),
        (("spec", "nodePoolAutoCreation", "enabled"), None),
    ],
    ids=[
        "lead-zero",
        "lead-a-string",
        "lead-misspelt",
        "flex-start-without-enabled",
        "run-duration-misspelt",
        "flex-start-and-spot",
        "nodepools-beside-other-fields",
        "no-zones",
        "unknown-when-unsatisfiable",
        "auto-creation-without-enabled",
    ],
)
def test_the_compute_class_check_can_fail(path: tuple[str | int, ...], value: Any) -> None:
    """The same check refuses a class with one field broken, as the API server would."""
    [manifest] = [m for m in manifests(run_program(STACK)) if m["kind"] == "ComputeClass"]
    assert compute_class_problems(manifest) == []
    assert compute_class_problems(_with(manifest, path, value)) != []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "replicas"), "two"),
        (("spec", "strategy", "type"), {"name": "Recreate"}),
        (("spec", "template", "spec", "tolerations"), {"key": catalog.GKE_TPU_RESOURCE}),
        (("spec", "template", "spec", "nodeSelectr"), {}),
    ],
    ids=["replicas-not-a-number", "strategy-not-a-string", "tolerations-not-a-list", "typo"],
)
def test_the_validator_rejects_a_broken_deployment(path: tuple[str, ...], value: Any) -> None:
    """The check can fail: the same validator refuses a Deployment with one field broken."""
    [deployment] = [m for m in manifests(run_program(STACK)) if m["kind"] == "Deployment"]
    node = deployment
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [("minAvailabe", 1), ("selector", ["app"]), ("minAvailable", {"count": 1})],
    ids=["typo", "selector-not-an-object", "min-available-not-a-number"],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_the_validator_rejects_a_broken_disruption_budget(
    key: str, value: Any, version: str
) -> None:
    """policy/v1 PodDisruptionBudget, strict: the check of the budget can fail."""
    [budget] = [m for m in manifests(run_program(STACK)) if m["kind"] == "PodDisruptionBudget"]
    kubernetes_validate.validate(budget, version, strict=True)
    budget["spec"][key] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(budget, version, strict=True)
