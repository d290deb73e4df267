"""What a served CustomResourceDefinition says: is it established, which versions it serves, and
whether its schema keeps every field the stack's objects send.

Established: the apiextensions-apiserver lists a CRD's kinds in API discovery, where
pulumi-kubernetes looks them up, only once its `Established` condition is True and the version
is `served` (`pkg/apiserver/customresource_discovery_controller.go`); before that the naming
controller reports `Established: False, reason Installing` (`pkg/controller/status/
naming_controller.go`).

Fields: a CRD's structural schema prunes every field it does not declare (unless
`x-kubernetes-preserve-unknown-fields`), and pulumi-kubernetes applies with
`fieldValidation: Warn` (`provider/pkg/await/await.go`), so an older schema drops a field with a
warning instead of refusing it (KEP-2885). For the ComputeClass that matters: early schemas had
no `priorities[].location` (datreeio/CRDs-catalog `cloud.google.com/computeclass_v1.json`, the
first version of 2025-05-28; it appears in the "from GKE 1.33" update of 2026-02-26), so the TPU
nodes would be made in any zone of the region; and they refused flex-start with TPUs outright
(the CEL rule "Flex Start provisioning model doesn't support TPUs", gone in the same update).
So the served schema is checked against the very spec the stack sends, rather than a version
floor: no GKE release note names the version that changed either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

ESTABLISHED = "Established"
_SELF_FIELD = re.compile(r"self\.(\w+)")


def condition(crd: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (crd.get("status") or {}).get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def is_established(crd: Mapping[str, Any]) -> bool:
    found = condition(crd, ESTABLISHED)
    return found is not None and found.get("status") == "True"


def pending_reason(crd: Mapping[str, Any]) -> str:
    """Why an existing CRD is not established yet, in its own words."""
    found = condition(crd, ESTABLISHED) or {}
    words = [str(found.get(k) or "") for k in ("reason", "message")]
    return ": ".join(w for w in words if w) or "no Established condition yet"


def served_version(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    for item in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(item, Mapping) and item.get("name") == version and item.get("served"):
            return item
    return None


def spec_schema(version: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema of `spec` in a served version (v1 CRDs: `schema.openAPIV3Schema`)."""
    schema = ((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}
    found = schema.get("spec")
    return found if isinstance(found, Mapping) else {}


def undeclared_fields(schema: Mapping[str, Any], value: Any, path: str = "spec") -> list[str]:
    """Paths in `value` the structural `schema` would prune (`priorities[].location`)."""
    if not isinstance(schema, Mapping) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, Mapping):
        declared = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        found: list[str] = []
        for key, item in value.items():
            if key in declared:
                found += undeclared_fields(declared[key], item, f"{path}.{key}")
            elif isinstance(extra, Mapping):
                found += undeclared_fields(extra, item, f"{path}.{key}")
            elif extra is not True:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, Sequence) and not isinstance(value, str):
        items = schema.get("items") or {}
        return sorted({p for v in value for p in undeclared_fields(items, v, f"{path}[]")})
    return []


def refuses_flex_start_tpus(rule: Mapping[str, Any]) -> bool:
    """The early schema's rule `!(has(self.flexStart) && self.flexStart.enabled == true &&
    has(self.tpu))`: a negation over flexStart and tpu alone. The later rule that also names
    `capacityCheckWaitTimeSeconds` (allowed *for* TPUs) is not one."""
    text = str(rule.get("rule") or "")
    fields = set(_SELF_FIELD.findall(text))
    return fields == {"flexStart", "tpu"} and text.replace(" ", "").startswith("!(")


def priority_refusals(schema: Mapping[str, Any], priorities: Sequence[Any]) -> list[str]:
    """Messages of the served CEL rules that would refuse one of our flex-start TPU priorities."""
    items = ((schema.get("properties") or {}).get("priorities") or {}).get("items") or {}
    rules = [r for r in items.get("x-kubernetes-validations") or [] if isinstance(r, Mapping)]
    flex_tpu = any(
        isinstance(p, Mapping) and (p.get("flexStart") or {}).get("enabled") and "tpu" in p
        for p in priorities
    )
    if not flex_tpu:
        return []
    return [str(r.get("message") or r.get("rule")) for r in rules if refuses_flex_start_tpus(r)]
