"""What a served CustomResourceDefinition says: is it established, which versions it serves, and
whether its schema keeps every field the stack's objects send.

An older ComputeClass schema silently prunes fields the stack sends (`priorities[].location`) or
refuses flex-start TPUs, and no GKE release note names the version that changed them, so the
served schema is checked against the very spec sent. Sources: docs/gke.md "The CRD's version".
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
    """In the CRD's own words."""
    found = condition(crd, ESTABLISHED) or {}
    words = [str(found.get(k) or "") for k in ("reason", "message")]
    return ": ".join(w for w in words if w) or "no Established condition yet"


def served_version(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    for item in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(item, Mapping) and item.get("name") == version and item.get("served"):
            return item
    return None


def spec_schema(version: Mapping[str, Any]) -> Mapping[str, Any]:
    """v1 CRDs: `schema.openAPIV3Schema.properties.spec`."""
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
    """The early rule `!(has(self.flexStart) && self.flexStart.enabled == true && has(self.tpu))`;
    not the later one that also names `capacityCheckWaitTimeSeconds` (allowed for TPUs)."""
    text = str(rule.get("rule") or "")
    fields = set(_SELF_FIELD.findall(text))
    return fields == {"flexStart", "tpu"} and text.replace(" ", "").startswith("!(")


def priority_refusals(schema: Mapping[str, Any], priorities: Sequence[Any]) -> list[str]:
    """Messages of the served CEL rules that would refuse our flex-start TPU priority."""
    items = ((schema.get("properties") or {}).get("priorities") or {}).get("items") or {}
    rules = [r for r in items.get("x-kubernetes-validations") or [] if isinstance(r, Mapping)]
    flex_tpu = any(
        isinstance(p, Mapping) and (p.get("flexStart") or {}).get("enabled") and "tpu" in p
        for p in priorities
    )
    if not flex_tpu:
        return []
    return [str(r.get("message") or r.get("rule")) for r in rules if refuses_flex_start_tpus(r)]
