"""Every Kubernetes object the GKE backend sends, validated offline against Kubernetes' own
OpenAPI schema (kubernetes-validate, which bundles the JSON schemas generated from it).

Strict mode: an unknown field fails, as `kubectl apply --validate=strict` would. Versions: 1.33,
the oldest GKE that runs flex-start TPUs, and the newest schema the library bundles.
The SecretProviderClass is a CRD of the Secrets Store CSI driver, which no Kubernetes schema
contains: its metadata is validated against ObjectMeta from the same bundle, and its spec by
the assertions in tests/test_gke_backend.py.
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
CRDS = {"SecretProviderClass"}
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
    rbac = ["Role", "RoleBinding"] if "Role" in kinds else []
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Job",
            "Namespace",
            "SecretProviderClass",
            "SecretProviderClass",
            "Service",
            "ServiceAccount",
            *rbac,
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
    assert checked == len(manifests(run)) - 2


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
            assert manifest["apiVersion"] == "secrets-store.csi.x-k8s.io/v1"
            assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}


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
