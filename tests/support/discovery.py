"""Validate a REST body against a Google API's discovery document, offline.

The documents ship with google-api-python-client (`googleapiclient/discovery_cache/documents`),
the same ones the TPU fake routes and validates with; this reuses that validator
(tests/support/fakes/tpu_api.py `SchemaValidator`: unknown fields, wrong types, enum values,
durations, nulls in lists), pointed at another document's schemas.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import googleapiclient

from tests.support.fakes.tpu_api import SchemaValidator

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@functools.cache
def document(name: str) -> dict[str, Any]:
    """`monitoring.v1`, `monitoring.v3`, ...: the bundled discovery document."""
    loaded: dict[str, Any] = json.loads((DOCUMENTS / f"{name}.json").read_text())
    return loaded


def violations(body: Any, api: str, schema: str) -> list[str]:
    """`path: message` for every way `body` breaks `schema` of `api`; [] when it is valid."""
    validator = SchemaValidator(strict_integers=True, schemas=document(api)["schemas"])
    _, found = validator.validate(body, schema, schema)
    return [f"{v.field}: {v.description}" for v in found]
