"""GKE's ComputeClass CRD (`computeclasses.cloud.google.com`), as this project pictures it.

This is the project's own picture, not GKE's manifest. GKE installs the CRD itself. Its API
module, `github.com/googlecloudplatform/compute-class-api`, is the one source the Go module proxy
refuses (every form tried), so the CRD cannot come from a module like the other CRDs
(tests/support/kube_crds.py). It was written here, each part read from these sources (never copied
in):
- [REF] GKE's reference page: https://docs.cloud.google.com/kubernetes-engine/docs/reference/
  crds/computeclass.md.txt. It gives the fields, their nesting and an example with a `tpu`
  priority and `status.conditions`.
- [ABOUT] "About custom ComputeClasses": https://docs.cloud.google.com/kubernetes-engine/docs/
  concepts/about-custom-compute-classes.md.txt: a ComputeClass is a cluster object that GKE's
  autoscaler reads, with `nodePoolAutoCreation` (pools made by the class from 1.33.3-gke.1136000)
  and zonal priorities.
- [TYPES] The API's Go types on GitHub: GoogleCloudPlatform/compute-class-api
  `api/cloud.google.com/v1/types.go` at 8067eaeb319407121f5559b07319f5fda7b6725d (2026-08-21).
  Their kubebuilder markers give the types, bounds, enums, defaults, required fields and CEL
  rules (`+kubebuilder:validation:XValidation`), the cluster scope, the short names and the
  status subresource. The repository's history starts on 2025-08-22.
- [EARLY] The first published copy of a served schema: datreeio/CRDs-catalog
  `cloud.google.com/computeclass_v1.json` at 79fe4ab423a23222ee43360e913a2eb2cc662bf0
  (2025-05-28). It is `crd(early=True)`: no `priorities[].location` and the rule "Flex Start
  provisioning model doesn't support TPUs", which never appears in [TYPES]' history. The
  `whenUnsatisfiable` default then was `ScaleUpAnyway`. datreeio publishes the schema only, so
  the early CRD's names, scope and subresource are taken to be [TYPES]'.

What is simplified:
- Modelled in full: the fields the stack sends (components/gke/compute_class.py:
  `nodePoolAutoCreation.enabled`, `whenUnsatisfiable`, and a priority's `machineType`, `tpu`,
  `location`, `flexStart`, `maxRunDurationSeconds` and `spot`), and the scalar fields that the
  carried rules name.
- Carried: the CEL rules on a priority the stack's classes meet (nodepools alone, machine
  family or type, machine type or minimum size, flex-start or Spot, and the capacity-check or
  early flex-start TPU rule). Left out, though some also name `machineType`: the rules on
  particular machine series (ek, e4a), the minimum-capacity rule, and the spec-level rules
  (Autopilot, confidential nodes, `priorityScore` all-or-none). The stack's classes meet none
  of them.
- Declared by name only, as `x-kubernetes-preserve-unknown-fields` objects (or lists of them):
  every other object field that GKE declares. A real server keeps such a field without
  checking its contents. These are `gpu`, `storage`, `reservations`, `nodeSystemConfig`,
  `placement`, `taints`, `minimumCapacity`, the spec's `activeMigration`, `autopilot`,
  `autoscalingPolicy`, `nodePoolConfig`, `nodePoolGroup`, `priorityDefaults`,
  `minimumCapacity` and `allocationStrategyDefaults`, and the status' `priorityStatuses` and
  `resourceInfo`.
- Left out: descriptions, `minCpuPlatform`'s enum, and the labels and annotations of GKE's
  add-on manager.

What it proves: a real kube-apiserver (tests/kube/test_kube_compute_class.py) applies this picture's
pruning, defaults, enums and CEL rules to the stack's class. It cannot prove that a given GKE
cluster serves the same schema. That is why components/gke/crd_schema.py checks, at deploy
time, the CRD that the cluster serves.
"""

from __future__ import annotations

from typing import Any

GROUP = "cloud.google.com"
VERSION = "v1"
KIND = "ComputeClass"
PLURAL = "computeclasses"
NAME = f"{PLURAL}.{GROUP}"


def _open() -> dict[str, Any]:
    """A field declared by name whose contents are kept unchecked (see the module docstring)."""
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _open_list() -> dict[str, Any]:
    return {"type": "array", "items": _open()}


# --- a priority's fields ([TYPES] `type Priority`, [EARLY] `priorities.items`) ----------------

#: [TYPES] `type TPU`: type, count (int64), topology, none required; [REF] `tpu` example.
TPU: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "count": {"type": "integer", "format": "int64"},
        "topology": {"type": "string"},
    },
}
#: [TYPES] `type FlexStart`: `enabled` required with default false; `type NodeRecyclingConfig`:
#: `leadTimeSeconds` required, 1..604800 (seven days). The same in [EARLY].
FLEX_START: dict[str, Any] = {
    "type": "object",
    "required": ["enabled"],
    "properties": {
        "enabled": {"type": "boolean", "default": False},
        "nodeRecycling": {
            "type": "object",
            "required": ["leadTimeSeconds"],
            "properties": {
                "leadTimeSeconds": {"type": "integer", "minimum": 1, "maximum": 604800},
            },
        },
    },
}
#: [TYPES] `type Location`: `zones` (atomic list, at least one), `locationPolicy` (enum
#: ANY, BALANCED), `zoneTypes` (unique, 1..3 of STANDARD, AI, CLUSTER_DEFAULT). Not in [EARLY].
LOCATION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "zones": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "x-kubernetes-list-type": "atomic",
        },
        "locationPolicy": {"type": "string", "enum": ["ANY", "BALANCED"]},
        "zoneTypes": {
            "type": "array",
            "items": {"type": "string", "enum": ["STANDARD", "AI", "CLUSTER_DEFAULT"]},
            "minItems": 1,
            "maxItems": 3,
        },
    },
}

#: The early schema's priority fields ([EARLY] `priorities.items.properties`).
_EARLY_PRIORITY: dict[str, Any] = {
    "flexStart": FLEX_START,
    "gpu": _open(),
    "machineFamily": {"type": "string"},
    "machineType": {"type": "string"},
    "maxPodsPerNode": {"type": "integer", "minimum": 8, "maximum": 256},
    "maxRunDurationSeconds": {"type": "integer"},
    "minCores": {"type": "integer", "minimum": 0},
    "minMemoryGb": {"type": "integer", "minimum": 0},
    "nodeSystemConfig": _open(),
    "nodepools": {"type": "array", "items": {"type": "string"}},
    "reservations": _open(),
    "spot": {"type": "boolean"},
    "storage": _open(),
    "tpu": TPU,
}
#: The current priority fields ([TYPES] `type Priority`, each field's markers).
_PRIORITY: dict[str, Any] = {
    **_EARLY_PRIORITY,
    "machineFamily": {"type": "string", "maxLength": 10},
    "machineType": {"type": "string", "maxLength": 100},
    "podFamily": {"type": "string", "enum": ["general-purpose", "general-purpose-arm"]},
    "location": LOCATION,
    "placement": _open(),
    "capacityCheckWaitTimeSeconds": {"type": "integer", "minimum": 1, "maximum": 86400},
    "minCpuPlatform": {"type": "string"},
    "nodeLabels": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": 100,
    },
    "taints": {**_open_list(), "maxItems": 100},
    "priorityScore": {"type": "integer", "minimum": 1, "maximum": 1000},
    "acceleratorNetworkProfile": {"type": "string", "maxLength": 63},
    "gpuDirect": {"type": "string"},
    "minimumCapacity": _open(),
    "instanceMetadata": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": 32,
    },
    "allocationStrategy": {"type": "string", "enum": ["lowest-cost", "fleet-efficiency"]},
    "enableNestedVirtualization": {"type": "boolean"},
}

# --- a priority's CEL rules ([TYPES] and [EARLY] `x-kubernetes-validations`) ------------------

#: [EARLY] (and datreeio's copy of 2026-08-02): `nodepools` stands alone in its priority. The
#: stack relies on it (components/gke/compute_class.py: why the class makes its own pools).
EARLY_NODEPOOL_RULE = {
    "rule": "has(self.nodepools) ? (size(dyn(self)) == 1) : true",
    "message": "Nodepool field cannot be set along with other fields",
}
#: [TYPES] at 8067eaeb: the same rule, now allowing `allocationStrategy` and `priorityScore`
#: beside `nodepools`, with a new message.
NODEPOOL_RULE = {
    "rule": "has(self.nodepools) ? (size(dyn(self)) == 1 + "
    "(has(self.allocationStrategy) ? 1 : 0) + (has(self.priorityScore) ? 1 : 0)) : true",
    "message": "Nodepool field cannot be set along with other nodepool configuration fields",
}
#: [TYPES] and [EARLY]: a priority names a machine family or a machine type, not both.
MACHINE_FAMILY_TYPE_RULE = {
    "rule": "!(has(self.machineFamily) && has(self.machineType))",
    "message": "MachineFamily and MachineType cannot be set together",
}
#: [TYPES] and [EARLY]: a machine type excludes minimum cores and memory.
MACHINE_TYPE_SIZE_RULE = {
    "rule": "!(has(self.machineType) && (has(self.minCores) || has(self.minMemoryGb)))",
    "message": "MachineType cannot be set together with MinCores/MinMemoryGb",
}
#: [TYPES] and [EARLY]: flex-start and Spot exclude each other. The stack sends one or the other.
FLEX_SPOT_RULE = {
    "rule": "!(has(self.flexStart) && has(self.spot) && self.spot == true && "
    "self.flexStart.enabled == true)",
    "message": "Flex Start provisioning model is incompatible with Spot",
}
#: [EARLY] only: flex-start refused TPUs outright. components/gke/crd_schema.py looks for it.
FLEX_TPU_RULE = {
    "rule": "!(has(self.flexStart) && self.flexStart.enabled == true && has(self.tpu))",
    "message": "Flex Start provisioning model doesn't support TPUs",
}
#: [TYPES] (and datreeio's copy of 2026-02-26 on): it names `tpu` too, but to allow it.
CAPACITY_CHECK_RULE = {
    "rule": "!has(self.capacityCheckWaitTimeSeconds) || has(self.tpu) || "
    "(has(self.flexStart) && self.flexStart.enabled)",
    "message": "capacityCheckWaitTimeSeconds is only supported for Flex Start and for "
    "multi-host TPUs",
}


def priority(*, early: bool = False) -> dict[str, Any]:
    """A priority rule's schema: at least one field ([TYPES], [EARLY] `MinProperties=1`)."""
    rules = [MACHINE_FAMILY_TYPE_RULE, MACHINE_TYPE_SIZE_RULE, FLEX_SPOT_RULE]
    if early:
        rules = [EARLY_NODEPOOL_RULE, *rules, FLEX_TPU_RULE]
    else:
        rules = [NODEPOOL_RULE, *rules, CAPACITY_CHECK_RULE]
    return {
        "type": "object",
        "minProperties": 1,
        "properties": dict(_EARLY_PRIORITY if early else _PRIORITY),
        "x-kubernetes-validations": rules,
    }


# --- the spec and status ([TYPES] `type ComputeClassSpec`, `type ComputeClassStatus`) --------

#: [TYPES] `type NodePoolAutoCreation`: `enabled` required, default false; the field's default is
#: `{enabled: false}`. The same in [EARLY]. (Its other fields are left out: not sent.)
NODE_POOL_AUTO_CREATION: dict[str, Any] = {
    "type": "object",
    "default": {"enabled": False},
    "required": ["enabled"],
    "properties": {"enabled": {"type": "boolean", "default": False}},
}
#: [TYPES] `WhenUnsatisfiable`: enum, required, default DoNotScaleUp. [EARLY]'s default is
#: ScaleUpAnyway (the change components/gke/compute_class.py sends the field explicitly for).
WHEN_UNSATISFIABLE = ["ScaleUpAnyway", "DoNotScaleUp"]


def spec(*, early: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {
        # [TYPES] `Priorities`: atomic list of 0..1000, default []. [EARLY]: no maxItems.
        "priorities": {
            "type": "array",
            "items": priority(early=early),
            "minItems": 0,
            "default": [],
            "x-kubernetes-list-type": "atomic",
            **({} if early else {"maxItems": 1000}),
        },
        "nodePoolAutoCreation": NODE_POOL_AUTO_CREATION,
        "whenUnsatisfiable": {
            "type": "string",
            "enum": WHEN_UNSATISFIABLE,
            "default": "ScaleUpAnyway" if early else "DoNotScaleUp",
        },
        "activeMigration": _open(),
        "autoscalingPolicy": _open(),
        "nodePoolConfig": _open(),
        "nodePoolGroup": _open(),
        "priorityDefaults": _open(),
    }
    if not early:
        properties |= {
            "autopilot": _open(),
            "description": {"type": "string"},
            "minimumCapacity": _open(),
            "allocationStrategyDefaults": _open(),
        }
    return {"type": "object", "required": ["whenUnsatisfiable"], "properties": properties}


#: metav1.Condition's schema as controller-gen writes it for `[]metav1.Condition`
#: (k8s.io/apimachinery `pkg/apis/meta/v1/types.go`, type Condition); [REF] `status.conditions`.
CONDITION: dict[str, Any] = {
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "type": {"type": "string", "maxLength": 316},
    },
}


def status(*, early: bool = False) -> dict[str, Any]:
    """[TYPES] `type ComputeClassStatus`; [EARLY] has only `conditions`."""
    properties: dict[str, Any] = {"conditions": {"type": "array", "items": CONDITION}}
    if not early:
        properties |= {"priorityStatuses": _open_list(), "resourceInfo": _open_list()}
    return {"type": "object", "properties": properties}


def schema(*, early: bool = False) -> dict[str, Any]:
    """The version's `openAPIV3Schema`: `spec` required ([TYPES] `Spec`, [EARLY] `required`)."""
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec(early=early),
            "status": status(early=early),
        },
    }


def crd(*, early: bool = False) -> dict[str, Any]:
    """The CustomResourceDefinition: cluster-scoped, short names `cc` and `ccs`, one served and
    stored version v1 with the status subresource ([TYPES] `+kubebuilder:resource`,
    `+kubebuilder:subresource:status`; [REF] `apiVersion: cloud.google.com/v1`)."""
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema(early=early)},
        "subresources": {"status": {}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "plural": PLURAL,
                "singular": KIND.lower(),
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": ["cc", "ccs"],
            },
            "scope": "Cluster",
            "versions": [version],
        },
    }


def rule_messages(node: Any) -> list[str]:
    """Every CEL rule's message in a schema, in order (what a refusal can name)."""
    found: list[str] = []
    if isinstance(node, dict):
        found += [r["message"] for r in node.get("x-kubernetes-validations") or []]
        for value in node.values():
            found += rule_messages(value)
    elif isinstance(node, list):
        for value in node:
            found += rule_messages(value)
    return found
