"""A loopback fake of the Secret Manager v1 REST API, and the ``fake_secret_manager`` fixture.

It serves, on ``http://127.0.0.1:<free port>``, the global (non-regional) endpoints that
``SecretManagerServiceClient(transport="rest")`` and ``curl`` on the TPU VM use:

- ``POST   v1/projects/{p}/secrets?secretId=ID``                secrets.create (409 if present)
- ``GET    v1/projects/{p}/secrets``                            secrets.list
- ``GET    v1/projects/{p}/secrets/{s}``                        secrets.get (404 if absent)
- ``DELETE v1/projects/{p}/secrets/{s}``                        secrets.delete
- ``POST   v1/projects/{p}/secrets/{s}:addVersion``             secrets.addVersion
- ``GET    v1/projects/{p}/secrets/{s}/versions``               versions.list (newest first)
- ``GET    v1/projects/{p}/secrets/{s}/versions/{v|latest}``    versions.get
- ``GET    v1/projects/{p}/secrets/{s}/versions/{v|latest}:access``  versions.access
- ``POST   v1/projects/{p}/secrets/{s}/versions/{v}:disable|:enable|:destroy``

Request bodies and query parameters are checked against the Secret Manager v1 discovery
document bundled with google-api-python-client (an unknown field is a 400, as on the real
API), and responses use its field names. Errors use Google's shape
``{"error": {"code", "message", "status", "details"?}}``.

Behaviour copied from the real service, because code that works here must work there:
- Every call needs ``Authorization: Bearer <token>`` (401 UNAUTHENTICATED otherwise).
- Resource names in responses carry the project *number*, not the id
  (``projects/123456789012/secrets/hf-token/versions/1``); requests may use either. Pass
  ``project_numbers=False`` to get ids back instead.
- ``latest`` is the most recently created version, whatever its state: accessing it when it is
  DISABLED or DESTROYED is a 400 FAILED_PRECONDITION, with no versions a 404.
- ``addVersion`` verifies ``payload.dataCrc32c`` when given (400 on mismatch) and stores a
  CRC32C either way; ``:access`` returns it as ``dataCrc32c`` (an int64, so a JSON string).
- The REST client asks for ``$alt=json;enum-encoding=int``; then enum fields (``state``) come
  back as numbers, otherwise as names (what ``curl`` sees).

Knobs: ``deny(*permissions)`` (403 PERMISSION_DENIED for those IAM permissions, or for all),
``service_disabled = True`` (403 with an ErrorInfo ``reason: SERVICE_DISABLED``),
``page_size`` (server page size for list calls), ``gate(api_method)`` (hold requests until
released). ``requests`` records every call.
Read-back: ``payloads()``, ``payload()``, ``version_states()``, ``secret()``; seeding:
``add_secret()``, ``add_version()``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import importlib.resources
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import google_crc32c
import pytest

from tests.support.fakes.loopback import LoopbackHttpServer

DEFAULT_TOKEN = "test-token"
MAX_PAYLOAD_BYTES = 64 * 1024
DEFAULT_PAGE_SIZE = 25

_STATE_NUMBERS = {"STATE_UNSPECIFIED": 0, "ENABLED": 1, "DISABLED": 2, "DESTROYED": 3}
_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")

# Which IAM permission each API method needs (for the ``deny`` knob and 403 messages).
PERMISSIONS = {
    "secrets.create": "secretmanager.secrets.create",
    "secrets.list": "secretmanager.secrets.list",
    "secrets.get": "secretmanager.secrets.get",
    "secrets.delete": "secretmanager.secrets.delete",
    "secrets.addVersion": "secretmanager.versions.add",
    "versions.list": "secretmanager.versions.list",
    "versions.get": "secretmanager.versions.get",
    "versions.access": "secretmanager.versions.access",
    "versions.disable": "secretmanager.versions.disable",
    "versions.enable": "secretmanager.versions.enable",
    "versions.destroy": "secretmanager.versions.destroy",
}


# --------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), the checksum Secret Manager uses; pure Python, payloads are tiny.


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), the checksum Secret Manager verifies on versions it stores."""
    return int(google_crc32c.value(data))


# --------------------------------------------------------------------------------------------
# The discovery document: schemas for request validation, parameters for query validation.


def _load_discovery() -> dict[str, Any]:
    doc = (
        importlib.resources.files("googleapiclient")
        / "discovery_cache"
        / "documents"
        / "secretmanager.v1.json"
    )
    loaded: dict[str, Any] = json.loads(doc.read_text(encoding="utf-8"))
    return loaded


_DISCOVERY = _load_discovery()
_SCHEMAS: dict[str, Any] = _DISCOVERY["schemas"]


def _discovery_method(api_method: str) -> dict[str, Any]:
    node: dict[str, Any] = _DISCOVERY["resources"]["projects"]
    *resources, method = api_method.split(".")
    if resources == ["versions"]:
        resources = ["secrets", "versions"]
    for resource in resources:
        node = node["resources"][resource]
    result: dict[str, Any] = node["methods"][method]
    return result


class ApiError(Exception):
    """An error response in Google's JSON shape."""

    def __init__(
        self,
        code: int,
        status: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def _invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


def _check_value(prop: Mapping[str, Any], value: Any, where: str) -> None:
    """Check ``value`` against a discovery-document property, as the API's JSON parser does."""
    if "$ref" in prop:
        _check_object(prop["$ref"], value, where)
        return
    kind = prop.get("type")
    bad = f"Invalid value at '{where}'"
    if kind == "object":
        if not isinstance(value, dict):
            raise _invalid(f"{bad}: expected an object")
        extra = prop.get("additionalProperties")
        if extra is not None:
            for key, item in value.items():
                _check_value(extra, item, f"{where}[{key}]")
    elif kind == "array":
        if not isinstance(value, list):
            raise _invalid(f"{bad}: expected a list")
        for index, item in enumerate(value):
            _check_value(prop.get("items", {}), item, f"{where}[{index}]")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise _invalid(f"{bad} (TYPE_BOOL), {json.dumps(value)}")
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _invalid(f"{bad} (TYPE_INT32), {json.dumps(value)}")
        if isinstance(value, str) and not re.fullmatch(r"-?\d+", value):
            raise _invalid(f"{bad} (TYPE_INT32), {json.dumps(value)}")
    elif kind == "string":
        fmt = prop.get("format")
        if fmt in ("int64", "uint64"):
            # proto3 JSON: 64-bit integers are strings, but numbers are accepted too.
            ok = (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, str) and re.fullmatch(r"-?\d+", value) is not None
            )
            if not ok:
                raise _invalid(f"{bad} (TYPE_INT64), {json.dumps(value)}")
            return
        enum = prop.get("enum")
        if enum is not None and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(enum):
                raise _invalid(f"{bad} (enum), {value}")
            return
        if not isinstance(value, str):
            raise _invalid(f"{bad} (TYPE_STRING), {json.dumps(value)}")
        if enum is not None and value not in enum:
            raise _invalid(f"{bad} (enum), {json.dumps(value)}")
        if fmt == "byte":
            _decode_bytes(value, where)


def _check_object(schema_name: str, value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise _invalid(f"Invalid value at '{where}' ({schema_name}): expected an object")
    properties: dict[str, Any] = _SCHEMAS[schema_name].get("properties", {})
    for key, item in value.items():
        if key not in properties:
            raise _invalid(
                f"Invalid JSON payload received. Unknown name {json.dumps(key)} at '{where}': "
                "Cannot find field."
            )
        _check_value(properties[key], item, f"{where}.{key}" if where else key)


def _decode_bytes(value: str, where: str) -> bytes:
    """Decode a proto3 JSON ``bytes`` field (standard or URL-safe base64, padding optional)."""
    text = value.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed") from None


def _now() -> str:
    stamp = datetime.datetime.now(datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _etag(*parts: object) -> str:
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:14]
    return f'"{digest}"'


# --------------------------------------------------------------------------------------------
# The store.


@dataclass
class _Version:
    number: int
    data: bytes
    crc32c: int
    client_checksum: bool
    create_time: str
    state: str = "ENABLED"
    destroy_time: str | None = None
    etag: str = ""

    def touch(self) -> None:
        self.etag = _etag(self.number, self.state, self.create_time, self.destroy_time)


@dataclass
class _Secret:
    project: str
    secret_id: str
    body: dict[str, Any]
    create_time: str
    versions: list[_Version] = field(default_factory=list)


@dataclass
class Gate:
    """Holds requests for one API method: ``reached`` is set when one arrives, and the
    request waits (up to ``timeout`` seconds) until ``release`` is set."""

    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    timeout: float = 30.0


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received (the body is the parsed JSON, or None)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    api_method: str | None
    status: int


_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets$"), "secrets.create"),
    ("GET", re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets$"), "secrets.list"),
    ("GET", re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)$"), "secrets.get"),
    (
        "DELETE",
        re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)$"),
        "secrets.delete",
    ),
    (
        "POST",
        re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+):addVersion$"),
        "secrets.addVersion",
    ),
    (
        "GET",
        re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)/versions$"),
        "versions.list",
    ),
    (
        "GET",
        re.compile(r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)/versions/(?P<v>[^/:]+)$"),
        "versions.get",
    ),
    (
        "GET",
        re.compile(
            r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)/versions/(?P<v>[^/:]+):access$"
        ),
        "versions.access",
    ),
    (
        "POST",
        re.compile(
            r"^/v1/projects/(?P<p>[^/:]+)/secrets/(?P<s>[^/:]+)/versions/(?P<v>[^/:]+)"
            r":(?P<action>disable|enable|destroy)$"
        ),
        "versions.{action}",
    ),
]


class FakeSecretManager(LoopbackHttpServer):
    """The fake service. Thread-safe; use as a context manager or via ``start``/``stop``."""

    def __init__(self, token: str = DEFAULT_TOKEN, *, project_numbers: bool = True) -> None:
        self.token = token
        self.project_numbers = project_numbers
        self.service_disabled = False
        self.page_size = DEFAULT_PAGE_SIZE
        self.requests: list[RecordedRequest] = []
        self._denied: set[str] = set()
        self._deny_all = False
        self._secrets: dict[tuple[str, str], _Secret] = {}
        self._numbers: dict[str, str] = {}
        self._lock = threading.RLock()
        super().__init__()
        self._gates: dict[str, Gate] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    thread_name = "fake-secret-manager"

    def start(self) -> FakeSecretManager:
        fake = self

        class Handler(_Handler):
            owner = fake

        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    # -- knobs -------------------------------------------------------------------------------

    def deny(self, *permissions: str) -> None:
        """Answer 403 PERMISSION_DENIED to calls needing these IAM permissions (all if none)."""
        with self._lock:
            if permissions:
                unknown = set(permissions) - set(PERMISSIONS.values())
                if unknown:
                    raise ValueError(f"unknown permissions: {sorted(unknown)}")
                self._denied.update(permissions)
            else:
                self._deny_all = True

    def allow_all(self) -> None:
        with self._lock:
            self._denied.clear()
            self._deny_all = False

    def project_number(self, project: str) -> str:
        """The (deterministic, fake) project number the fake uses for ``project``."""
        if project.isdigit():
            return project
        with self._lock:
            if project not in self._numbers:
                digest = hashlib.sha256(project.encode()).hexdigest()
                self._numbers[project] = str(100_000_000_000 + int(digest[:10], 16) % 10**11)
            return self._numbers[project]

    # -- seeding and read-back (for tests) ----------------------------------------------------

    def add_secret(
        self, project: str, secret_id: str, *, labels: Mapping[str, str] | None = None
    ) -> str:
        """Create a secret directly (as if someone made it earlier); returns its name."""
        with self._lock:
            key = (self._project_id(project), secret_id)
            body: dict[str, Any] = {"replication": {"automatic": {}}}
            if labels:
                body["labels"] = dict(labels)
            self._secrets[key] = _Secret(key[0], secret_id, body, _now())
            return self._secret_name(self._secrets[key])

    def add_version(
        self, project: str, secret_id: str, data: bytes, *, state: str = "ENABLED"
    ) -> str:
        """Add a version directly (creating the secret if needed); returns its name."""
        with self._lock:
            key = (self._project_id(project), secret_id)
            if key not in self._secrets:
                self.add_secret(project, secret_id)
            secret = self._secrets[key]
            version = _Version(len(secret.versions) + 1, data, crc32c(data), False, _now(), state)
            version.touch()
            secret.versions.append(version)
            return self._version_name(secret, version)

    def has_secret(self, project: str, secret_id: str) -> bool:
        with self._lock:
            return (self._project_id(project), secret_id) in self._secrets

    def secret(self, project: str, secret_id: str) -> dict[str, Any]:
        """The secret as secrets.get would return it (enums as names)."""
        with self._lock:
            return self._secret_json(self._get_secret(project, secret_id))

    def payloads(self, project: str, secret_id: str) -> list[bytes]:
        """Every version's stored payload, oldest (version 1) first; destroyed ones are b""."""
        with self._lock:
            return [v.data for v in self._get_secret(project, secret_id).versions]

    def payload(self, project: str, secret_id: str, version: str | int = "latest") -> bytes:
        """One version's stored payload (``latest`` = the most recently created)."""
        with self._lock:
            secret = self._get_secret(project, secret_id)
            return self._find_version(secret, str(version)).data

    def version_states(self, project: str, secret_id: str) -> dict[int, str]:
        """``{version number: "ENABLED" | "DISABLED" | "DESTROYED"}``."""
        with self._lock:
            return {v.number: v.state for v in self._get_secret(project, secret_id).versions}

    def gate(self, api_method: str, timeout: float = 30.0) -> Gate:
        """Hold the next requests for ``api_method`` (after auth) until ``release`` is set,
        e.g. to inspect the client process while it waits."""
        with self._lock:
            self._gates[api_method] = Gate(timeout=timeout)
            return self._gates[api_method]

    def calls(self, api_method: str) -> list[RecordedRequest]:
        """Recorded requests for one API method, e.g. ``"secrets.addVersion"``."""
        with self._lock:
            return [r for r in self.requests if r.api_method == api_method]

    # -- internals -----------------------------------------------------------------------------

    def _project_id(self, project: str) -> str:
        """Map a project number the fake handed out back to its id."""
        with self._lock:
            for project_id, number in self._numbers.items():
                if number == project:
                    return project_id
        return project

    def _project_in_names(self, project_id: str) -> str:
        return self.project_number(project_id) if self.project_numbers else project_id

    def _secret_name(self, secret: _Secret) -> str:
        return f"projects/{self._project_in_names(secret.project)}/secrets/{secret.secret_id}"

    def _version_name(self, secret: _Secret, version: _Version) -> str:
        return f"{self._secret_name(secret)}/versions/{version.number}"

    def _get_secret(self, project: str, secret_id: str) -> _Secret:
        key = (self._project_id(project), secret_id)
        secret = self._secrets.get(key)
        if secret is None:
            name = f"projects/{self._project_in_names(key[0])}/secrets/{secret_id}"
            raise ApiError(404, "NOT_FOUND", f"Secret [{name}] not found.")
        return secret

    def _find_version(self, secret: _Secret, version_id: str) -> _Version:
        if version_id == "latest":
            if not secret.versions:
                raise ApiError(
                    404,
                    "NOT_FOUND",
                    f"Secret [{self._secret_name(secret)}] not found or has no versions.",
                )
            return secret.versions[-1]
        if version_id.isdigit() and 1 <= int(version_id) <= len(secret.versions):
            return secret.versions[int(version_id) - 1]
        name = f"{self._secret_name(secret)}/versions/{version_id}"
        raise ApiError(404, "NOT_FOUND", f"Secret Version [{name}] not found.")

    def _secret_json(self, secret: _Secret) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self._secret_name(secret)}
        out.update(secret.body)
        out["createTime"] = secret.create_time
        out["etag"] = _etag(secret.project, secret.secret_id, secret.create_time)
        return out

    def _version_json(self, secret: _Secret, version: _Version, int_enums: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self._version_name(secret, version),
            "createTime": version.create_time,
            "state": _STATE_NUMBERS[version.state] if int_enums else version.state,
            "replicationStatus": {"automatic": {}},
            "etag": version.etag,
            "clientSpecifiedPayloadChecksum": version.client_checksum,
        }
        if version.destroy_time is not None:
            out["destroyTime"] = version.destroy_time
        return out

    def _check_access(self, api_method: str, resource: str, project_id: str) -> None:
        if self.service_disabled:
            number = self.project_number(project_id)
            url = (
                "https://console.developers.google.com/apis/api/secretmanager.googleapis.com/"
                f"overview?project={number}"
            )
            message = (
                f"Secret Manager API has not been used in project {number} before or it is "
                f"disabled. Enable it by visiting {url} then retry. If you enabled this API "
                "recently, wait a few minutes for the action to propagate to our systems and retry."
            )
            raise ApiError(
                403,
                "PERMISSION_DENIED",
                message,
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "SERVICE_DISABLED",
                        "domain": "googleapis.com",
                        "metadata": {
                            "service": "secretmanager.googleapis.com",
                            "consumer": f"projects/{number}",
                            "serviceTitle": "Secret Manager API",
                            "containerInfo": number,
                            "activationUrl": url,
                        },
                    },
                    {
                        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                        "locale": "en-US",
                        "message": message,
                    },
                    {
                        "@type": "type.googleapis.com/google.rpc.Help",
                        "links": [
                            {"description": "Google developers console API activation", "url": url}
                        ],
                    },
                ],
            )
        permission = PERMISSIONS[api_method]
        if self._deny_all or permission in self._denied:
            raise ApiError(
                403,
                "PERMISSION_DENIED",
                f"Permission '{permission}' denied for resource '{resource}' (or it may not "
                "exist).",
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "IAM_PERMISSION_DENIED",
                        "domain": "secretmanager.googleapis.com",
                        "metadata": {"permission": permission, "resource": resource},
                    }
                ],
            )

    def handle(
        self,
        method: str,
        raw_path: str,
        headers: Mapping[str, str],
        raw_body: bytes,
    ) -> tuple[int, dict[str, Any], str | None, Any]:
        """Serve one request: returns (status, JSON body, api method, parsed request body)."""
        parsed = urllib.parse.urlsplit(raw_path)
        path = urllib.parse.unquote(parsed.path)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        api_method: str | None = None
        body: Any = None
        try:
            if raw_body:
                try:
                    body = json.loads(raw_body)
                except ValueError:
                    raise _invalid("Invalid JSON payload received.") from None
            auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
            if auth != f"Bearer {self.token}":
                raise ApiError(
                    401,
                    "UNAUTHENTICATED",
                    "Request had invalid authentication credentials. Expected OAuth 2 access "
                    "token, login cookie or other valid authentication credential.",
                )
            for verb, pattern, name in _ROUTES:
                match = pattern.match(path)
                if match and verb == method:
                    groups = match.groupdict()
                    api_method = name.format(action=groups.get("action", ""))
                    break
            else:
                raise ApiError(404, "NOT_FOUND", f"No such method: {method} {path}")
            self._check_query(api_method, query)
            request = _discovery_method(api_method).get("request")
            if request is not None:
                _check_object(request["$ref"], body if body is not None else {}, "")
            elif body not in (None, {}):
                raise _invalid("This method does not take a request body.")
            int_enums = any("enum-encoding=int" in v for v in query.get("$alt", []))
            with self._lock:
                gate = self._gates.get(api_method)
            if gate is not None:
                gate.reached.set()
                gate.release.wait(gate.timeout)
            with self._lock:
                status, out = self._dispatch(api_method, groups, query, body or {}, int_enums)
        except ApiError as error:
            status, out = error.code, error.body()
        except Exception as error:  # noqa: BLE001 - a bug in the fake: answer 500, keep serving
            status = 500
            out = ApiError(500, "INTERNAL", f"fake Secret Manager: {error!r}").body()
        return status, out, api_method, body

    def _check_query(self, api_method: str, query: Mapping[str, list[str]]) -> None:
        allowed = set(_DISCOVERY.get("parameters", {}))
        for name, param in _discovery_method(api_method).get("parameters", {}).items():
            if param.get("location") == "query":
                allowed.add(name)
        for name in query:
            if name.startswith("$") or name in allowed:
                continue
            raise _invalid(
                f"Invalid JSON payload received. Unknown name {json.dumps(name)}: "
                "Cannot bind query parameter."
            )

    def _dispatch(
        self,
        api_method: str,
        groups: Mapping[str, str],
        query: Mapping[str, list[str]],
        body: Mapping[str, Any],
        int_enums: bool,
    ) -> tuple[int, dict[str, Any]]:
        project_id = self._project_id(groups["p"])
        project_name = f"projects/{self._project_in_names(project_id)}"
        secret_id = groups.get("s")
        resource = project_name if secret_id is None else f"{project_name}/secrets/{secret_id}"
        if "v" in groups:
            resource += f"/versions/{groups['v']}"
        self._check_access(api_method, resource, project_id)

        if api_method == "secrets.create":
            return 200, self._create_secret(project_id, query, body)
        if api_method == "secrets.list":
            secrets = [s for (p, _), s in self._secrets.items() if p == project_id]
            secrets.sort(key=lambda s: s.create_time, reverse=True)
            page, token = self._page(secrets, query)
            out: dict[str, Any] = {
                "secrets": [self._secret_json(s) for s in page],
                "totalSize": len(secrets),
            }
            if token:
                out["nextPageToken"] = token
            return 200, out
        assert secret_id is not None
        secret = self._get_secret(project_id, secret_id)
        if api_method == "secrets.get":
            return 200, self._secret_json(secret)
        if api_method == "secrets.delete":
            del self._secrets[(project_id, secret_id)]
            return 200, {}
        if api_method == "secrets.addVersion":
            return 200, self._add_version(secret, body, int_enums)
        if api_method == "versions.list":
            versions = list(reversed(secret.versions))
            versions = self._filter_versions(versions, query)
            page_versions, token = self._page(versions, query)
            out = {
                "versions": [self._version_json(secret, v, int_enums) for v in page_versions],
                "totalSize": 0 if query.get("filter") else len(versions),
            }
            if token:
                out["nextPageToken"] = token
            return 200, out

        version = self._find_version(secret, groups["v"])
        if api_method == "versions.get":
            return 200, self._version_json(secret, version, int_enums)
        if api_method == "versions.access":
            if version.state != "ENABLED":
                raise ApiError(
                    400,
                    "FAILED_PRECONDITION",
                    f"Secret Version [{self._version_name(secret, version)}] is in "
                    f"{version.state} state.",
                )
            return 200, {
                "name": self._version_name(secret, version),
                "payload": {
                    "data": base64.b64encode(version.data).decode("ascii"),
                    "dataCrc32c": str(version.crc32c),
                },
            }
        etag = body.get("etag")
        if etag and etag != version.etag:
            raise ApiError(409, "ABORTED", "The etag provided does not match the current etag.")
        if version.state == "DESTROYED":
            raise ApiError(
                400,
                "FAILED_PRECONDITION",
                f"Secret Version [{self._version_name(secret, version)}] is in DESTROYED state.",
            )
        if api_method == "versions.disable":
            version.state = "DISABLED"
        elif api_method == "versions.enable":
            version.state = "ENABLED"
        elif api_method == "versions.destroy":
            version.state = "DESTROYED"
            version.data = b""
            version.destroy_time = _now()
        version.touch()
        return 200, self._version_json(secret, version, int_enums)

    def _create_secret(
        self, project_id: str, query: Mapping[str, list[str]], body: Mapping[str, Any]
    ) -> dict[str, Any]:
        secret_id = (query.get("secretId") or [""])[0]
        if not secret_id:
            raise _invalid("The secret_id field is required.")
        if not _SECRET_ID.match(secret_id):
            raise _invalid(
                f"Secret ID [{secret_id}] must be 1-255 characters of letters, digits, "
                "underscores (_) and hyphens (-)."
            )
        replication = body.get("replication") or {}
        if "automatic" not in replication and "userManaged" not in replication:
            raise _invalid("Secret.replication must be set (automatic or user_managed).")
        for key, value in (body.get("labels") or {}).items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
                raise _invalid(f"Label [{key}: {value}] is not a valid label.")
        key = (project_id, secret_id)
        if key in self._secrets:
            name = f"projects/{self._project_in_names(project_id)}/secrets/{secret_id}"
            raise ApiError(409, "ALREADY_EXISTS", f"Secret [{name}] already exists.")
        stored = {
            k: v for k, v in body.items() if k not in ("name", "createTime", "etag", "policyMember")
        }
        self._secrets[key] = _Secret(project_id, secret_id, stored, _now())
        return self._secret_json(self._secrets[key])

    def _add_version(
        self, secret: _Secret, body: Mapping[str, Any], int_enums: bool
    ) -> dict[str, Any]:
        payload = body.get("payload")
        if not isinstance(payload, dict):
            raise _invalid("The payload field is required.")
        data = _decode_bytes(payload.get("data", ""), "payload.data")
        if len(data) > MAX_PAYLOAD_BYTES:
            raise _invalid(f"Secret payload is larger than {MAX_PAYLOAD_BYTES} bytes.")
        actual = crc32c(data)
        given = payload.get("dataCrc32c")
        if given is not None and int(given) != actual:
            raise _invalid(
                "Checksum verification failed: payload.data_crc32c does not match the CRC32C "
                "of payload.data."
            )
        version = _Version(len(secret.versions) + 1, data, actual, given is not None, _now())
        version.touch()
        secret.versions.append(version)
        return self._version_json(secret, version, int_enums)

    def _filter_versions(
        self, versions: list[_Version], query: Mapping[str, list[str]]
    ) -> list[_Version]:
        text = (query.get("filter") or [""])[0].strip()
        if not text:
            return versions
        match = re.fullmatch(r"state\s*[:=]\s*(ENABLED|DISABLED|DESTROYED)", text)
        if match is None:
            raise _invalid(f"The fake Secret Manager only supports 'state:STATE' filters: {text}")
        return [v for v in versions if v.state == match.group(1)]

    def _page(self, items: list[Any], query: Mapping[str, list[str]]) -> tuple[list[Any], str]:
        size_text = (query.get("pageSize") or ["0"])[0]
        size = int(size_text) if size_text.isdigit() and int(size_text) > 0 else self.page_size
        token = (query.get("pageToken") or [""])[0]
        start = 0
        if token:
            try:
                start = int(base64.urlsafe_b64decode(token.encode()).decode())
            except (ValueError, binascii.Error):
                raise _invalid("The page token is invalid.") from None
        end = start + size
        next_token = ""
        if end < len(items):
            next_token = base64.urlsafe_b64encode(str(end).encode()).decode()
        return items[start:end], next_token


class _Handler(BaseHTTPRequestHandler):
    owner: FakeSecretManager
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()}
        status, out, api_method, body = self.owner.handle(
            self.command, self.path, headers, raw_body
        )
        parsed = urllib.parse.urlsplit(self.path)
        with self.owner._lock:
            self.owner.requests.append(
                RecordedRequest(
                    method=self.command,
                    path=urllib.parse.unquote(parsed.path),
                    query=urllib.parse.parse_qs(parsed.query, keep_blank_values=True),
                    headers=headers,
                    body=body,
                    api_method=api_method,
                    status=status,
                )
            )
        data = json.dumps(out, indent=2).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _serve
    do_POST = _serve
    do_DELETE = _serve
    do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_secret_manager() -> Iterator[FakeSecretManager]:
    """A running ``FakeSecretManager``; point ``SECRET_MANAGER_API_ENDPOINT`` at ``.url``."""
    fake = FakeSecretManager()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
