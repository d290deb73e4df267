"""Inputs checked against the trimmed Pulumi schema of the provider a stand-in imitates.

The schemas are read from the SDKs the program pins by tests/support/standins/schema_trim.py, when
first needed, and kept in tests/support/standins/.schemas/ (not committed: the provider's own data
comes from its installed package, never copied into the project), named after the package's version
and a hash of the trimmer, so a new pin or a changed trimmer makes them anew.

A bridged provider's `Check` refuses what Terraform's schema validation refuses; the messages
below are Terraform plugin SDK v2's
(`helper/schema/schema.go`: "Missing required argument", "Invalid or unknown key"), the type
errors in the words of its `validateType` ("expected type of X to be ..."). Values not known yet
(a preview) pass: Terraform validates them at apply.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.standins.values import is_unknown

SCHEMAS = Path(__file__).resolve().parent / ".schemas"
#: Provider name -> the Python SDK the program pins for it (requirements.txt).
PACKAGES = {"gcp": "pulumi_gcp", "random": "pulumi_random", "tls": "pulumi_tls",
            "command": "pulumi_command"}  # fmt: skip
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
    """The trimmed schema of provider `name` (gcp, random, tls, command), made from its pinned
    SDK once (~5 s for gcp) and then read from the cache: every plugin process the engine
    starts loads it."""
    return Schema(trimmed_cached(PACKAGES[name]))


@functools.cache
def trimmed_cached(package: str) -> dict[str, Any]:
    # Imported here: the trimmer reads the SDKs' sources, which a plugin needs only on a miss.
    from tests.support.standins import schema_trim

    trimmer = hashlib.sha256(Path(schema_trim.__file__).read_bytes()).hexdigest()[:12]
    path = SCHEMAS / f"{package}-{importlib.metadata.version(package)}-{trimmer}.json"
    try:
        found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return found
    except (OSError, ValueError):
        pass
    made = json.loads(json.dumps(schema_trim.trimmed(package)))
    SCHEMAS.mkdir(exist_ok=True)
    # Written whole, then renamed: parallel test workers and plugins read it at once.
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(made), encoding="utf-8")
    partial.replace(path)
    return dict(made)
