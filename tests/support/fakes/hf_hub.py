"""A loopback fake of the two Hugging Face Hub endpoints a token check calls.

`scripts/save_hf_token.py` asks huggingface_hub itself whether a token can read the stack's
model, so this fake answers what the library sends, at the paths the library builds
(huggingface_hub 2.4.0, `hf_api.py`):

- ``GET /api/models/{repo_id}/auth-check`` (``HfApi.auth_check``): 200 when the token may read
  the repository;
- ``GET /api/models/{repo_id}`` (``HfApi.model_info``): the model's public metadata (a gated
  model's card is readable without access; only its files are not).

Errors carry what ``huggingface_hub.utils._http.hf_raise_for_status`` turns into exceptions:
the ``X-Error-Code`` header (``GatedRepo`` -> ``GatedRepoError``, ``RepoNotFound`` ->
``RepositoryNotFoundError``), the ``X-Error-Message`` header and a ``{"error": ...}`` body. The
texts are the Hub's as users report them (huggingface/diffusers#4447, transformers#31367:
"Access to model X is restricted and you are not in the authorized list. Visit
https://huggingface.co/X to ask for access."; "Invalid credentials in Authorization header");
the fine-grained-token 403 is modelled on reports of the Hub's wording and is plausible, not
copied from the Hub's (closed) source. Point the library here with ``HF_ENDPOINT=fake.url``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.fakes.loopback import LoopbackHttpServer

GATED_MODEL = "google/gemma-4-E2B-it"
OPEN_MODEL = "openai-community/gpt2"
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


@dataclass
class Token:
    """A token the fake knows: whose it is, which gated models its owner was granted."""

    user: str
    granted: set[str] = field(default_factory=set)
    #: A fine-grained token without "read access to public gated repositories".
    fine_grained_without_gated: bool = False


@dataclass(frozen=True)
class Request:
    path: str
    authorization: str


class Gate:
    """Hold the next matching request until the test releases it (`reached` is set first)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()


class FakeHfHub(LoopbackHttpServer):
    """The fake Hub. Knobs: ``models`` (id -> gated?), ``tokens``, ``fail_next``, ``gate``."""

    thread_name = "fake-hf-hub"

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[str, bool] = {GATED_MODEL: True, OPEN_MODEL: False}
        self.tokens: dict[str, Token] = {}
        self.requests: list[Request] = []
        self._failures: list[int] = []
        self._gate: Gate | None = None
        self._lock = threading.Lock()

    def start(self) -> FakeHfHub:
        fake = self

        class Handler(_Handler):
            owner = fake

        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    # -- knobs ---------------------------------------------------------------------------------

    def add_token(
        self, token: bytes | str, *, granted: tuple[str, ...] = (), fine_grained: bool = False
    ) -> None:
        text = token.decode() if isinstance(token, bytes) else token
        self.tokens[text] = Token("someone", set(granted), fine_grained)

    def fail_next(self, status: int, n: int = 1) -> None:
        """Answer the next ``n`` requests with ``status`` (e.g. 503 while the Hub is down)."""
        with self._lock:
            self._failures.extend([status] * n)

    def gate(self) -> Gate:
        with self._lock:
            self._gate = Gate()
            return self._gate

    # -- the service -------------------------------------------------------------------------

    def answer(self, path: str, authorization: str) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body) for one GET."""
        with self._lock:
            self.requests.append(Request(path, authorization))
            gate, self._gate = self._gate, None
            failure = self._failures.pop(0) if self._failures else None
        if gate is not None:
            gate.reached.set()
            gate.release.wait(30)
        if failure is not None:
            return failure, {}, {"error": "Internal Error - We're working hard to fix this."}
        prefix = "/api/models/"
        if not path.startswith(prefix):
            return 404, {}, {"error": "Sorry, we can't find the page you are looking for."}
        repo_id, auth_check = path[len(prefix) :], False
        if repo_id.endswith("/auth-check"):
            repo_id, auth_check = repo_id[: -len("/auth-check")], True
        token = None
        if authorization:
            token = self.tokens.get(authorization.removeprefix("Bearer "))
            if token is None:
                return _error(401, INVALID_CREDENTIALS)
        gated = self.models.get(repo_id)
        if gated is None:
            return _error(404, "Repository not found", code="RepoNotFound")
        if not auth_check:
            # model_info: public metadata, also of a gated model.
            return 200, {}, {"id": repo_id, "modelId": repo_id, "private": False,
                             "gated": "manual" if gated else False}  # fmt: skip
        if not gated:
            return 200, {}, {}
        if token is None:
            return _error(
                401,
                f"Access to model {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
                code="GatedRepo",
            )
        if token.fine_grained_without_gated:
            return _error(
                403,
                "Please enable access to public gated repositories in your fine-grained token "
                "settings to view this repository.",
            )
        if repo_id not in token.granted:
            return _error(
                403,
                f"Access to model {repo_id} is restricted and you are not in the authorized "
                f"list. Visit https://huggingface.co/{repo_id} to ask for access.",
                code="GatedRepo",
            )
        return 200, {}, {}


def _error(status: int, message: str, *, code: str = "") -> tuple[int, dict[str, str], Any]:
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    return status, headers, {"error": message}


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHfHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        status, headers, body = self.owner.answer(path, self.headers.get("Authorization", ""))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_hf_hub() -> Iterator[FakeHfHub]:
    """A running ``FakeHfHub``; point ``HF_ENDPOINT`` at ``.url``."""
    with FakeHfHub() as hub:
        yield hub
