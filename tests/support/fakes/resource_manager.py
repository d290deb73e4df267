"""Loopback fake of the two organization-policy reads the node-access gate makes.

The org-policy check (`components/vm/org_policy.py`) asks whether a boolean constraint is enforced
on the project: the legacy constraints through Cloud Resource Manager v1, the managed ones
(`compute.managed.*`) through the Organization Policy API v2. One server answers both; the tests
point both endpoint variables at it.

Cloud Resource Manager v1 `projects.getEffectiveOrgPolicy`, modelled on the method's reference
page (https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy)
and the `OrgPolicy`/`BooleanPolicy` schemas of the discovery document bundled with
google-api-python-client (`cloudresourcemanager.v1.json`):

* `POST /v1/projects/{project}:getEffectiveOrgPolicy` with body `{"constraint": "constraints/X"}`;
  any other body field is 400 INVALID_ARGUMENT, as the JSON->proto front end answers.
* The answer is an OrgPolicy: `{"constraint": ..., "booleanPolicy": {"enforced": true}}` when
  enforced; `{"constraint": ..., "booleanPolicy": {}}` when not (no etag: it is computed).

Organization Policy API v2 `projects.policies.getEffectivePolicy`, modelled on the discovery
document google-api-python-client 2.202.0 bundles
(`googleapiclient/discovery_cache/documents/orgpolicy.v2.json`, revision 20260723):

* `GET /v2/{+name}:getEffectivePolicy`, `name` matching `^projects/[^/]+/policies/[^/]+$`, no
  body; the only query parameters the client sends are the standard ones (`alt`, `$.xgafv`), so
  anything else is 400, as is a name outside the pattern.
* The answer is a `GoogleCloudOrgpolicyV2Policy`: `name` with the project NUMBER ("responses
  will return the name using the equivalent project number"), and `spec` (a
  `GoogleCloudOrgpolicyV2PolicySpec`) whose `rules[]` carry `enforce` for boolean and managed
  constraints; no `etag` and no rule `condition` ("it is an evaluated policy"). Enforced:
  `spec.rules = [{"enforce": true}]`; not enforced: `[{"enforce": false}]`. `v2_answers`
  replaces the answer for one constraint (a spec with `reset`, no spec at all, a conditional
  rule) where the document allows shapes this fake does not produce by itself.
* With the API disabled (`v2_disabled`) Google's front end answers 403 PERMISSION_DENIED with
  reason SERVICE_DISABLED; the wording is plausible, not copied.

Both: without `orgpolicy.policy.get` (`forbidden`) 403 PERMISSION_DENIED (wording plausible, not
copied); requests without the bearer token get 401 UNAUTHENTICATED.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.fakes.loopback import LoopbackHttpServer, send_json

PATH_RE = re.compile(r"^/v1/projects/(?P<project>[^/:]+):getEffectiveOrgPolicy$")
V2_PATH_RE = re.compile(r"^/v2/(?P<name>.+):getEffectivePolicy$")
#: `parameters.name.pattern` of `orgpolicy.projects.policies.getEffectivePolicy`.
V2_NAME_RE = re.compile(r"^projects/[^/]+/policies/[^/]+$")
#: The standard query parameters of the discovery document the client may send.
V2_QUERY = {"alt", "$.xgafv"}
PROJECT_NUMBER = "123456789012"


class FakeResourceManager(LoopbackHttpServer):
    """Knobs: `enforced` (constraint names without `constraints/`, legacy or managed),
    `forbidden` (403 on both APIs), `v2_disabled` (403 SERVICE_DISABLED on v2 only),
    `v2_answers` (constraint -> the v2 answer to send instead)."""

    thread_name = "fake-resource-manager"

    def __init__(self, token: str = "test-token") -> None:
        super().__init__()
        self.token = token
        self.enforced: set[str] = set()
        self.forbidden = False
        self.v2_disabled = False
        self.v2_answers: dict[str, dict[str, Any]] = {}
        #: (project, constraint) of every answered v1 request.
        self.requests: list[tuple[str, str]] = []
        #: The policy name of every answered v2 request: `projects/P/policies/C`.
        self.v2_requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                match = PATH_RE.match(self.path.split("?")[0])
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._error(401, "UNAUTHENTICATED", "Request had invalid credentials.")
                elif match is None:
                    self._error(404, "NOT_FOUND", f"no route for {self.path}")
                else:
                    self._answer_policy(match.group("project"), raw)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                match = V2_PATH_RE.match(path)
                params = set(urllib.parse.parse_qs(query, keep_blank_values=True))
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._error(401, "UNAUTHENTICATED", "Request had invalid credentials.")
                elif match is None:
                    self._error(404, "NOT_FOUND", f"no route for {self.path}")
                elif int(self.headers.get("Content-Length") or 0):
                    self._error(400, "INVALID_ARGUMENT", "getEffectivePolicy takes no body")
                elif params - V2_QUERY:
                    self._error(400, "INVALID_ARGUMENT", f"unknown parameters {sorted(params)}")
                else:
                    self._answer_v2(urllib.parse.unquote(match.group("name")))

            def _answer_v2(self, name: str) -> None:
                if not V2_NAME_RE.match(name):
                    self._error(400, "INVALID_ARGUMENT", f"invalid policy name {name!r}")
                    return
                _, project, _, constraint = name.split("/")
                fake.v2_requests.append(name)
                if fake.v2_disabled:
                    info = {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "SERVICE_DISABLED",
                        "domain": "googleapis.com",
                        "metadata": {"service": "orgpolicy.googleapis.com"},
                    }
                    self._error(
                        403,
                        "PERMISSION_DENIED",
                        "Organization Policy API has not been used in project "
                        f"{PROJECT_NUMBER} before or it is disabled.",
                        details=[info],
                    )
                    return
                if fake.forbidden:
                    self._forbidden(project)
                    return
                answer = fake.v2_answers.get(constraint)
                if answer is None:
                    enforce = constraint in fake.enforced
                    answer = {"spec": {"rules": [{"enforce": enforce}]}}
                name = f"projects/{PROJECT_NUMBER}/policies/{constraint}"
                self._answer(200, {"name": name, **answer})

            def _answer_policy(self, project: str, raw: bytes) -> None:
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
                    return
                unknown = sorted(set(body) - {"constraint"})
                constraint = str(body.get("constraint") or "")
                if unknown or not constraint.startswith("constraints/"):
                    self._error(400, "INVALID_ARGUMENT", f"bad request body {body!r}")
                    return
                fake.requests.append((project, constraint))
                if fake.forbidden:
                    self._forbidden(project)
                    return
                enforced = constraint.removeprefix("constraints/") in fake.enforced
                boolean = {"enforced": True} if enforced else {}
                self._answer(200, {"constraint": constraint, "booleanPolicy": boolean})

            def _forbidden(self, project: str) -> None:
                self._error(
                    403,
                    "PERMISSION_DENIED",
                    f"Permission 'orgpolicy.policy.get' denied on resource "
                    f"'//cloudresourcemanager.googleapis.com/projects/{project}' "
                    "(or it may not exist).",
                )

            def _error(
                self,
                status: int,
                code: str,
                message: str,
                details: list[dict[str, Any]] | None = None,
            ) -> None:
                error: dict[str, Any] = {"code": status, "message": message, "status": code}
                if details:
                    error["details"] = details
                self._answer(status, {"error": error})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                send_json(self, status, body, content_type="application/json; charset=UTF-8")

            def log_message(self, *_args: object) -> None:
                return

        self._handler = Handler

    def start(self) -> FakeResourceManager:
        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), self._handler))


@pytest.fixture
def fake_resource_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResourceManager]:
    """The fake, with both org-policy clients pointed at it (endpoint and token variables)."""
    server = FakeResourceManager().start()
    monkeypatch.setenv("RESOURCE_MANAGER_API_ENDPOINT", server.url)
    monkeypatch.setenv("ORG_POLICY_API_ENDPOINT", server.url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", server.token)
    try:
        yield server
    finally:
        server.stop()
