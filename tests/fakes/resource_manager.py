"""Loopback fake of Cloud Resource Manager v1 `projects.getEffectiveOrgPolicy`.

The org-policy check (`components/org_policy.py`) asks it whether a boolean constraint is
enforced on the project. Modelled on the method's reference page
(https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy) and
the `OrgPolicy`/`BooleanPolicy` schemas of the discovery document bundled with
google-api-python-client (`cloudresourcemanager.v1.json`):

* `POST /v1/projects/{project}:getEffectiveOrgPolicy` with body `{"constraint": "constraints/X"}`;
  any other body field is 400 INVALID_ARGUMENT, as the JSON->proto front end answers.
* The answer is an OrgPolicy: `{"constraint": ..., "booleanPolicy": {"enforced": true}}` when
  enforced; `{"constraint": ..., "booleanPolicy": {}}` when not (no etag: it is computed).
* Without `orgpolicy.policy.get` the API answers 403 PERMISSION_DENIED; the message wording
  ("Permission 'orgpolicy.policy.get' denied on resource ...") is plausible, not copied.
* Requests without the bearer token get 401 UNAUTHENTICATED.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.fakes.loopback import LoopbackHttpServer, send_json

PATH_RE = re.compile(r"^/v1/projects/(?P<project>[^/:]+):getEffectiveOrgPolicy$")


class FakeResourceManager(LoopbackHttpServer):
    """Knobs: `enforced` (constraint names without `constraints/`), `forbidden` (answer 403)."""

    thread_name = "fake-resource-manager"

    def __init__(self, token: str = "test-token") -> None:
        super().__init__()
        self.token = token
        self.enforced: set[str] = set()
        self.forbidden = False
        #: (project, constraint) of every answered request.
        self.requests: list[tuple[str, str]] = []
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
                    self._error(
                        403,
                        "PERMISSION_DENIED",
                        f"Permission 'orgpolicy.policy.get' denied on resource "
                        f"'//cloudresourcemanager.googleapis.com/projects/{project}' "
                        "(or it may not exist).",
                    )
                    return
                enforced = constraint.removeprefix("constraints/") in fake.enforced
                boolean = {"enforced": True} if enforced else {}
                self._answer(200, {"constraint": constraint, "booleanPolicy": boolean})

            def _error(self, status: int, code: str, message: str) -> None:
                self._answer(
                    status, {"error": {"code": status, "message": message, "status": code}}
                )

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                send_json(self, status, body, content_type="application/json; charset=UTF-8")

            def log_message(self, *_args: object) -> None:
                return

        self._handler = Handler

    def start(self) -> FakeResourceManager:
        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), self._handler))


@pytest.fixture
def fake_resource_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResourceManager]:
    """The fake, with the org-policy client pointed at it (endpoint and token variables)."""
    server = FakeResourceManager().start()
    monkeypatch.setenv("RESOURCE_MANAGER_API_ENDPOINT", server.url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", server.token)
    try:
        yield server
    finally:
        server.stop()
