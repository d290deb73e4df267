"""The stack's ComputeClass against the project's own ComputeClass CRD, on a real API server.

GKE's CRD cannot come from its Go module (the proxy refuses it), so
tests/support/compute_class_crd.py is the project's own picture of it: the current version, and
`early=True`, the first published copy (no `priorities[].location`, and a rule refusing flex-start
TPUs). Here a real kube-apiserver v1.34 (tests/support/kube_cluster.py) serves that picture. These
tests show that:
- the server accepts the CRD (structural schema, CEL rules that compile);
- the server applies it to the classes of the `v6e4-gke` program, as rendered under mocks
  (tests/support/gke_manifests.py): pruning, enums, CEL rules;
- the server's verdict agrees with the deploy-time pre-flight of a served CRD
  (components/gke/crd_schema.py). The server is the judge: where they differ, a test fails.

Both versions are served by one control plane in turn. The CRD is deleted and made again with
the other schema (`ServedClass.use`), and `dryRun=All` keeps the comparisons from storing
anything.

What this cannot show: that a given GKE cluster serves this schema. That is what the pre-flight
checks at deploy time, against the CRD the cluster serves.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from components.gke import crd_schema
from tests.support import compute_class_crd, kube_cluster, kube_crds
from tests.support.gke_manifests import STACK, VARIANTS, manifests
from tests.support.pulumi_program import run_program

pytestmark = pytest.mark.kube

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{compute_class_crd.NAME}"
DISCOVERY = f"/apis/{compute_class_crd.GROUP}/{compute_class_crd.VERSION}"
#: The program's classes: the stack file's (flex-start) and the other provisioning models.
CLASS_VARIANTS: dict[str, dict[str, Any]] = {
    "flex-start": VARIANTS["stack-file"],
    "spot": VARIANTS["spot-one-zone"],
    "on-demand": {"tpu-vllm:tpu.provisioning": "on-demand", "tpu-vllm:tpu.maxRunDuration": None},
}
#: A strict or warned unknown field, as the API server words it (apimachinery's strict decoding
#: errors, `unknown field "PATH"`); in a `Warning` header the quotes are escaped.
_UNKNOWN_FIELD = re.compile(r'unknown field \\?"([^"\\]+)\\?"')


@pytest.fixture(scope="module")
def classes() -> dict[str, dict[str, Any]]:
    found = {}
    for name, variant in CLASS_VARIANTS.items():
        [manifest] = [
            m for m in manifests(run_program(STACK, variant)) if m["kind"] == "ComputeClass"
        ]
        found[name] = manifest
    return found


class ServedClass:
    """Which version of the project's ComputeClass CRD the control plane serves."""

    def __init__(self, plane: kube_cluster.ControlPlane) -> None:
        self.plane = plane
        self.early: bool | None = None

    def _listed(self) -> bool:
        """Whether API discovery lists the kind (a 404 there is plain text, not a Status)."""
        try:
            status, body = self.plane.request("GET", DISCOVERY)
        except json.JSONDecodeError:
            return False
        return status == 200 and any(
            r.get("name") == compute_class_crd.PLURAL for r in body.get("resources") or []
        )

    def use(self, *, early: bool) -> dict[str, Any]:
        """Serves that version (deleting the other with its objects), then returns the CRD as the
        server has it: what the pre-flight would read from a cluster."""
        if self.early is not early:
            self.early = None  # unknown until the swap is done
            if self.plane.request("GET", CRD_PATH)[0] == 200:
                status, body = self.plane.request("DELETE", CRD_PATH)
                assert status in (200, 202), body

                def gone() -> bool:
                    return self.plane.request("GET", CRD_PATH)[0] == 404

                self.plane.wait_for("the ComputeClass CRD's deletion", gone, 60)
                self.plane.wait_for(
                    "the ComputeClass kind out of discovery", lambda: not self._listed(), 60
                )
            self.plane.install_crd(compute_class_crd.crd(early=early))
            # Discovery and the resource handler read the same informer: once listed, served.
            self.plane.wait_for("the ComputeClass kind in discovery", self._listed, 60)
            self.early = early
        return self.plane.get(CRD_PATH)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kube_cluster.ControlPlane]:
    with kube_cluster.running(tmp_path_factory.mktemp("kube")) as cp:
        # What GKE would have installed (tests/support/kube_crds.py), the ComputeClass picture among
        # them.
        for crd in kube_crds.gke_crds():
            cp.install_crd(crd)
        yield cp


@pytest.fixture(scope="module")
def served(plane: kube_cluster.ControlPlane) -> ServedClass:
    found = ServedClass(plane)
    found.early = False  # installed by `plane`, from kube_crds.gke_crds()
    return found


def post(
    plane: kube_cluster.ControlPlane, obj: dict[str, Any], validation: str, *, dry_run: bool = True
) -> tuple[int, dict[str, Any], list[str]]:
    """POST a class with `fieldValidation` (Strict: as `kubectl --validate=strict`; Warn: as
    pulumi-kubernetes applies); the status, the body and the `Warning` headers of that call."""
    before = len(plane.warnings)
    query = f"fieldValidation={validation}" + ("&dryRun=All" if dry_run else "")
    status, body = plane.request("POST", f"{plane.collection(obj)}?{query}", obj)
    return status, body, plane.warnings[before:]


def unknown_fields(texts: list[str]) -> list[str]:
    """The unknown fields named, with list indexes folded as the pre-flight writes them."""
    return sorted({re.sub(r"\[\d+\]", "[]", f) for t in texts for f in _UNKNOWN_FIELD.findall(t)})


def with_priority(manifest: dict[str, Any], **fields: Any) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["spec"]["priorities"][0] |= fields
    return changed


# --- the current CRD ---------------------------------------------------------------------------


def test_the_crd_is_accepted_and_served_as_written(
    plane: kube_cluster.ControlPlane, served: ServedClass
) -> None:
    """The API server accepts the picture (a non-structural schema or a CEL rule that does not
    compile is refused at create) and serves its rules and enums unchanged."""
    found = served.use(early=False)
    assert found["spec"]["scope"] == "Cluster"
    assert found["spec"]["names"]["plural"] == "computeclasses"
    [version] = found["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    assert version["schema"] == compute_class_crd.crd()["spec"]["versions"][0]["schema"]


def test_the_programs_class_is_stored_with_strict_validation_and_no_warning(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    """The stack file's class, stored for real (then deleted: the other tests' dry runs take its
    name): stored as sent, nothing pruned, refused or defaulted, and then readable."""
    served.use(early=False)
    sent = classes["flex-start"]
    status, body, warnings = post(plane, sent, "Strict", dry_run=False)
    assert status == 201, body.get("message", body)
    assert warnings == []
    assert body["spec"] == sent["spec"]
    assert body["metadata"]["labels"] == sent["metadata"]["labels"]
    path = plane.path(sent)
    assert plane.get(path)["spec"] == sent["spec"]
    assert plane.request("DELETE", path)[0] == 200
    plane.wait_for("the class's deletion", lambda: plane.request("GET", path)[0] == 404, 30)


@pytest.mark.parametrize("variant", list(CLASS_VARIANTS))
def test_every_provisioning_models_class_is_accepted_as_sent(
    plane: kube_cluster.ControlPlane,
    served: ServedClass,
    classes: dict[str, dict[str, Any]],
    variant: str,
) -> None:
    """Flex-start, Spot and on-demand, in a dry run with strict validation: as sent, no warning
    (every field with a default is sent, so none is added)."""
    served.use(early=False)
    sent = classes[variant]
    status, body, warnings = post(plane, sent, "Strict")
    assert status == 201, body.get("message", body)
    assert warnings == []
    assert body["spec"] == sent["spec"]


def test_a_flex_start_priority_with_spot_is_refused_by_the_rule(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    served.use(early=False)
    status, body, _ = post(plane, with_priority(classes["flex-start"], spot=True), "Strict")
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert "spec.priorities[0]: Invalid value" in body["message"]
    assert compute_class_crd.FLEX_SPOT_RULE["message"] in body["message"]


def test_an_unknown_when_unsatisfiable_is_refused_by_the_enum(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    served.use(early=False)
    bogus = copy.deepcopy(classes["flex-start"])
    bogus["spec"]["whenUnsatisfiable"] = "Bogus"
    status, body, _ = post(plane, bogus, "Strict")
    assert status == 422, body
    assert (
        'spec.whenUnsatisfiable: Unsupported value: "Bogus": supported values: '
        '"ScaleUpAnyway", "DoNotScaleUp"'
    ) in body["message"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"flexStart": {"enabled": True, "nodeRecycling": {"leadTimeSeconds": 0}}},
            "leadTimeSeconds in body should be greater than or equal to 1",
        ),
        ({"location": {"zones": []}}, "location.zones in body should have at least 1 items"),
        ({"nodepools": ["tpu-pool"]}, compute_class_crd.NODEPOOL_RULE["message"]),
    ],
    ids=["lead-zero", "no-zones", "nodepools-beside-other-fields"],
)
def test_a_broken_priority_is_refused(
    plane: kube_cluster.ControlPlane,
    served: ServedClass,
    classes: dict[str, dict[str, Any]],
    fields: dict[str, Any],
    message: str,
) -> None:
    """Bounds, list sizes and the rule that keeps `nodepools` alone, on the stack's priority."""
    served.use(early=False)
    status, body, _ = post(plane, with_priority(classes["flex-start"], **fields), "Strict")
    assert status == 422, body
    assert message in body["message"]


# --- the early CRD -----------------------------------------------------------------------------


def test_the_early_crd_refuses_the_stacks_flex_start_tpus_and_prunes_the_zones(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    """As pulumi-kubernetes applies (`fieldValidation: Warn`): the zones draw a warning, the
    rule refuses the class."""
    served.use(early=True)
    status, body, warnings = post(plane, classes["flex-start"], "Warn")
    assert status == 422, body
    assert compute_class_crd.FLEX_TPU_RULE["message"] in body["message"]
    assert unknown_fields(warnings) == ["spec.priorities[].location"]


def test_the_early_crd_drops_a_spot_class_s_zones(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    """No rule refuses a Spot TPU class; only its zones go: refused under Strict, pruned with a
    warning under Warn (the class would then make nodes in any zone of the region)."""
    served.use(early=True)
    status, body, _ = post(plane, classes["spot"], "Strict")
    assert status == 400, body
    assert unknown_fields([body["message"]]) == ["spec.priorities[].location"]
    status, body, warnings = post(plane, classes["spot"], "Warn")
    assert status == 201, body
    assert unknown_fields(warnings) == ["spec.priorities[].location"]
    assert "location" not in body["spec"]["priorities"][0]
    assert body["spec"]["priorities"][0]["tpu"] == classes["spot"]["spec"]["priorities"][0]["tpu"]


# --- the pre-flight against the server ---------------------------------------------------------


def preflight(crd: dict[str, Any], manifest: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What components/gke/crd_schema.py predicts from a served CRD: (pruned, refusals)."""
    version = crd_schema.served_version(crd, compute_class_crd.VERSION)
    assert version is not None
    schema = crd_schema.spec_schema(version)
    spec = manifest["spec"]
    pruned = sorted(crd_schema.undeclared_fields(schema, spec))
    return pruned, sorted(crd_schema.priority_refusals(schema, spec.get("priorities") or []))


def server_verdict(
    plane: kube_cluster.ControlPlane, crd: dict[str, Any], manifest: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """What the server did with the class, as pulumi-kubernetes sends it: (the fields it warned
    it pruned, the messages of the served CRD's rules that refused it)."""
    status, body, warnings = post(plane, manifest, "Warn")
    assert status in (201, 422), body  # created (dry run), or refused by validation
    messages = compute_class_crd.rule_messages(crd["spec"]["versions"])
    refused = sorted(m for m in messages if status == 422 and m in body["message"])
    if status == 422:
        assert refused, f"refused, but by no rule of the CRD: {body['message']}"
    return unknown_fields(warnings), refused


@pytest.mark.parametrize("variant", list(CLASS_VARIANTS))
@pytest.mark.parametrize("early", [False, True], ids=["current", "early"])
def test_the_preflight_agrees_with_the_server(
    plane: kube_cluster.ControlPlane,
    served: ServedClass,
    classes: dict[str, dict[str, Any]],
    early: bool,
    variant: str,
) -> None:
    """On the same served CRD, the pre-flight's prediction for each of the program's classes
    is what the server does: the fields it prunes and the rules that refuse the class."""
    crd = served.use(early=early)
    manifest = classes[variant]
    assert preflight(crd, manifest) == server_verdict(plane, crd, manifest)


def test_the_comparison_can_fail(
    plane: kube_cluster.ControlPlane, served: ServedClass, classes: dict[str, dict[str, Any]]
) -> None:
    """The check above is no tautology: a pre-flight reading the current CRD while the server
    serves the early one predicts neither the pruning nor the refusal the server then does."""
    current = served.use(early=False)
    crd = served.use(early=True)
    manifest = classes["flex-start"]
    assert preflight(current, manifest) == ([], [])
    assert server_verdict(plane, crd, manifest) == (
        ["spec.priorities[].location"],
        [compute_class_crd.FLEX_TPU_RULE["message"]],
    )
