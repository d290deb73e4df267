"""Inputs checked against the trimmed Pulumi schema of the provider a stand-in imitates.

The schemas are in tests/fixtures/pulumi_schemas/ (made by tests/standins/schema_trim.py from
the SDKs the program pins). A bridged provider's `Check` refuses what Terraform's schema
validation refuses; the messages below are Terraform plugin SDK v2's
(`helper/schema/schema.go`: "Missing required argument", "Invalid or unknown key"), the type
errors in the words of its `validateType` ("expected type of X to be ..."). Values not known yet
(a preview) pass: Terraform validates them at apply.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.standins.values import is_unknown

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "pulumi_schemas"
_TYPE_NAMES = {
    "string": "string",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "map",
}


@dataclass(frozen=True)
class Failure:
    """A `CheckFailure`: the property (a path, `replication.auto`) and why."""

    property: str
    reason: str


class Schema:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.name: str = data["name"]
        self.version: str = data["version"]

    def resource(self, token: str) -> dict[str, Any]:
        found: dict[str, Any] | None = self.data["resources"].get(token)
        if found is None:
            raise KeyError(f"{token} is not a resource the {self.name} stand-in serves")
        return found

    def function(self, token: str) -> dict[str, Any]:
        found: dict[str, Any] | None = self.data["functions"].get(token)
        if found is None:
            raise KeyError(f"{token} is not a function the {self.name} stand-in serves")
        return found

    def check_inputs(self, token: str, inputs: dict[str, Any]) -> list[Failure]:
        spec = self.resource(token)
        return self._check_object(
            inputs, spec["inputProperties"], spec.get("requiredInputs", []), ""
        )

    def check_args(self, token: str, args: dict[str, Any]) -> list[Failure]:
        spec = self.function(token)["inputs"]
        return self._check_object(args, spec["properties"], spec.get("required", []), "")

    # -- the walk ---------------------------------------------------------------------------
    def _check_object(
        self, value: dict[str, Any], properties: dict[str, Any], required: list[str], path: str
    ) -> list[Failure]:
        failures = [
            Failure(
                f"{path}{name}",
                f'Missing required argument. The argument "{name}" is required, but no '
                "definition was found.",
            )
            for name in required
            if value.get(name) is None
        ]
        for key, item in value.items():
            where = f"{path}{key}"
            if key.startswith("__"):
                continue
            if key not in properties:
                failures.append(Failure(where, f"{where}: Invalid or unknown key"))
                continue
            failures.extend(self._check(item, properties[key], where))
        return failures

    def _check(self, value: Any, spec: dict[str, Any], path: str) -> list[Failure]:
        if value is None or is_unknown(value):
            return []
        ref = spec.get("$ref")
        if ref == "pulumi.json#/Any":
            return []
        if ref:
            target = self.data["types"][ref.removeprefix("#/types/")]
            if "enum" in target:  # a string enum (command's `logging`): its values' type
                return self._check(value, {"type": target["type"]}, path)
            if not isinstance(value, dict):
                return [Failure(path, f"expected type of {path} to be an object")]
            return self._check_object(
                value, target.get("properties", {}), target.get("required", []), f"{path}."
            )
        kind = spec.get("type")
        if not _is_a(value, kind):
            expected = _TYPE_NAMES.get(str(kind), str(kind))
            return [Failure(path, f"expected type of {path} to be {expected}")]
        if kind == "array":
            return [
                failure
                for index, item in enumerate(value)
                for failure in self._check(item, spec.get("items", {}), f"{path}[{index}]")
            ]
        if kind == "object":
            return [
                failure
                for key, item in value.items()
                for failure in self._check(
                    item, spec.get("additionalProperties", {}), f"{path}.{key}"
                )
            ]
        return []


def _is_a(value: Any, kind: str | None) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and value == int(value)
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return True


@functools.cache
def load(name: str) -> Schema:
    """The one trimmed schema of provider `name` (gcp, random, tls) in the fixtures."""
    matches = sorted(SCHEMAS.glob(f"{name}-*.json"))
    if len(matches) != 1:
        raise FileNotFoundError(f"expected one {name}-VERSION.json in {SCHEMAS}, found {matches}")
    return Schema(json.loads(matches[0].read_text(encoding="utf-8")))
