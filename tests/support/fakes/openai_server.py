"""A loopback fake of vLLM's OpenAI-compatible server, and the ``fake_openai`` fixture.

It serves, on ``http://127.0.0.1:<free port>``, the routes ``scripts/smoke_test.py`` and other
consumers of the stack's ``openai_base_url`` touch, in the shapes vLLM's OpenAI server
(``vllm serve``) answers with:

- ``GET  /v1/models``            ``{"object": "list", "data": [{"id": MODEL, ...}]}``
- ``POST /v1/chat/completions``  ``chat.completion`` objects; with ``tools`` (and
  ``tool_choice`` other than ``"none"``) a tool call with ``finish_reason: "tool_calls"``
- ``GET  /metrics``              vLLM 0.32's exposition (tests/support/fixtures/vllm_metrics), its
  token counters counting what this fake served
- ``GET  /health``               200 with an empty body, or ``health_status`` (vLLM's
  ``vllm/entrypoints/serve/instrumentator/health.py``: 200, or 503 once the engine is dead);
  outside ``/v1``, so no key is asked for
- ``POST /v1/completions``       a ``text_completion`` whose ``text`` is ``""``: seed 000 §1.4
  found raw completions return an empty string on ``-it`` models, a trap a smoke test must
  not fall into (so a client that calls it "passes" nothing)

Behaviour copied from vLLM, because code that works here must work there:
- Everything under ``/v1`` needs ``Authorization: Bearer <api_key>`` (vLLM's ``--api-key``);
  otherwise 401. vLLM's ``AuthenticationMiddleware`` answers ``{"error": "Unauthorized"}``
  (``auth_error_shape = "vllm"``, the default); ``"openai"`` answers OpenAI's nested shape
  ``{"error": {"message", "type", "param", "code": 401}}`` instead, so clients are tested
  against both.
- Other errors use vLLM's ``ErrorResponse``: ``{"error": {"message", "type", "param",
  "code"}}``, e.g. 404 ``NotFoundError`` "The model `X` does not exist." for a wrong model, 400
  ``BadRequestError`` for ``tool_choice: "auto"`` when the server was started without
  ``--enable-auto-tool-choice``. An unknown route is FastAPI's 404 ``{"detail": "Not Found"}``.
- Messages carry ``tool_calls: []`` when there are none, and ``content: null`` beside a tool
  call. With ``reasoning`` set, the text goes in ``reasoning`` and in ``reasoning_content``
  (the older name, still written by vLLM releases of the gemma4 era).

Knobs (attributes, change them at any time): ``api_key``, ``model``, ``reply`` (the chat
answer), ``malformed_tool_call`` (one of ``MALFORMED_VARIANTS`` or None), ``empty_content``
(content ``null``), ``reasoning`` (text for the reasoning fields, or None), ``delay`` (seconds
to wait before answering any request), ``auto_tool_choice`` (False mimics a server started
without ``--enable-auto-tool-choice``), ``auth_error_shape``, ``refused_status`` (401, vLLM's;
403 as an authorizing proxy in front of it would answer), ``health_status``,
``internal_error`` (chat completions answer vLLM's HTTP 500 ``ErrorResponse``, as its serving
layer does for a ``GenerationError``). ``requests``
records every request; ``paths()`` lists their paths.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

from tests.support.fakes.fake_docker import metrics_page
from tests.support.fakes.loopback import LoopbackHttpServer

DEFAULT_API_KEY = "fake-vllm-api-key"
DEFAULT_MODEL = "google/gemma-4-E2B-it"
DEFAULT_REPLY = "Hi there, how are you?"
MAX_MODEL_LEN = 32768

# How a tool call can go wrong, as a parser or a model gets it wrong.
MALFORMED_VARIANTS = (
    "non_json",  # arguments are not JSON: '{city: Paris'
    "wrong_name",  # calls a function that was not offered
    "no_tool_calls",  # the call stays in the content text, tool_calls is empty
    "wrong_finish_reason",  # a good call, but finish_reason "stop"
    "missing_argument",  # valid JSON without the required argument
)
MalformedVariant = Literal[
    "non_json", "wrong_name", "no_tool_calls", "wrong_finish_reason", "missing_argument"
]
AuthErrorShape = Literal["vllm", "openai"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received (``body`` is the parsed JSON, or None)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int


class FakeOpenAI(LoopbackHttpServer):
    """The fake server. Thread-safe; use as a context manager or via ``start``/``stop``."""

    def __init__(self, api_key: str = DEFAULT_API_KEY, model: str = DEFAULT_MODEL) -> None:
        self.api_key = api_key
        self.model = model
        self.reply = DEFAULT_REPLY
        self.malformed_tool_call: MalformedVariant | None = None
        self.empty_content = False
        self.reasoning: str | None = None
        self.delay = 0.0
        self.auto_tool_choice = True
        self.auth_error_shape: AuthErrorShape = "vllm"
        #: The status of a refused key: vLLM's own 401, or 403 as a proxy in front answers.
        self.refused_status = 401
        self.health_status = 200
        self.internal_error = False
        #: Prompt and generation tokens served (what /metrics' counters say).
        self.tokens = (0.0, 0.0)
        self.requests: list[RecordedRequest] = []
        self.created = int(time.time())
        self._lock = threading.Lock()
        super().__init__()

    # -- lifecycle ---------------------------------------------------------------------------

    thread_name = "fake-openai"

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(_Handler):
            owner = fake

        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    @property
    def base_url(self) -> str:
        """``url + "/v1"``, what the stack exports as ``openai_base_url``."""
        return f"{self.url}/v1"

    # -- read-back ---------------------------------------------------------------------------

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def calls(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- behaviour ---------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        if self.delay:
            time.sleep(self.delay)
        if method == "GET" and path == "/health":
            return self.health_status, b""
        if method == "GET" and path == "/metrics":
            # Outside /v1, so no key (vLLM's GUARDED_PREFIX); the vLLM 0.32 sample with this
            # server's model and the tokens it served (tests/support/fixtures/vllm_metrics).
            return 200, metrics_page(self.model, *self.tokens).encode()
        if path.startswith("/v1") and not self._authorized(headers):
            return self.refused_status, self._auth_error()
        if method == "GET" and path == "/v1/models":
            return 200, self._models()
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat(body)
        if method == "POST" and path == "/v1/completions":
            return self._completion(body)
        if path in ("/v1/models", "/v1/chat/completions", "/v1/completions"):
            return 405, {"detail": "Method Not Allowed"}
        return 404, {"detail": "Not Found"}

    def _authorized(self, headers: dict[str, str]) -> bool:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and token == self.api_key

    def _auth_error(self) -> Any:
        if self.auth_error_shape == "vllm":
            return {"error": "Unauthorized"}
        return {
            "error": {
                "message": "Incorrect API key provided.",
                "type": "AuthenticationError",
                "param": None,
                "code": 401,
            }
        }

    @staticmethod
    def _error(code: int, kind: str, message: str, param: str | None = None) -> tuple[int, Any]:
        return code, {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def _models(self) -> Any:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": MAX_MODEL_LEN,
                    "permission": [
                        {
                            "id": f"modelperm-{uuid.uuid4().hex}",
                            "object": "model_permission",
                            "created": self.created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
            ],
        }

    def _check_common(self, body: Any) -> tuple[int, Any] | None:
        if not isinstance(body, dict):
            return self._error(400, "BadRequestError", "Expected a JSON object body")
        if body.get("model") != self.model:
            return self._error(
                404, "NotFoundError", f"The model `{body.get('model')}` does not exist.", "model"
            )
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return self._error(400, "BadRequestError", "max_tokens must be at least 1", None)
        return None

    def _usage(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        # What the engine's counters add up (vllm:prompt_tokens_total, ...generation...).
        self.tokens = (self.tokens[0] + prompt_tokens, self.tokens[1] + completion_tokens)
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }

    def _chat(self, body: Any) -> tuple[int, Any]:
        error = self._check_common(body)
        if error is not None:
            return error
        if self.internal_error:
            return self._error(500, "InternalServerError", "Internal server error")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._error(400, "BadRequestError", "messages must be a non-empty list")
        tools = body.get("tools") or []
        tool_choice = body.get("tool_choice", "auto" if tools else "none")
        if tools and tool_choice == "auto" and not self.auto_tool_choice:
            return self._error(
                400,
                "BadRequestError",
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set",
            )
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if (
                not isinstance(tool, dict)
                or tool.get("type") != "function"
                or not isinstance(function, dict)
                or not isinstance(function.get("name"), str)
            ):
                return self._error(400, "BadRequestError", "invalid tool definition", "tools")

        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if self.empty_content else self.reply,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning": self.reasoning,
            "reasoning_content": self.reasoning,
        }
        finish_reason = "stop"
        if tools and tool_choice != "none":
            message, finish_reason = self._tool_call(message, tools[0]["function"])
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self._usage(24, 12),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    def _tool_call(
        self, message: dict[str, Any], function: dict[str, Any]
    ) -> tuple[dict[str, Any], str]:
        name: str = function["name"]
        parameters = function.get("parameters") or {}
        required = parameters.get("required") or list(parameters.get("properties") or {})
        arguments_obj = {str(key): "Paris" for key in required[:1]}
        arguments = json.dumps(arguments_obj)
        finish_reason = "tool_calls"
        variant = self.malformed_tool_call
        if variant == "non_json":
            arguments = "{city: Paris"
        elif variant == "wrong_name":
            name = "get_time"
        elif variant == "missing_argument":
            arguments = json.dumps({"location": "Paris"})
        elif variant == "wrong_finish_reason":
            finish_reason = "stop"
        elif variant == "no_tool_calls":
            # What a model writes when the tool-call parser does not recognise its syntax.
            text = f'<|tool_call>call:{name}{{city:<|"|>Paris<|"|>}}<tool_call|>'
            return {**message, "content": text}, "stop"
        call = {
            "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        return {**message, "content": None, "tool_calls": [call]}, finish_reason

    def _completion(self, body: Any) -> tuple[int, Any]:
        error = self._check_common(body)
        if error is not None:
            return error
        choice = {
            "index": 0,
            "text": "",  # seed 000 §1.4: raw completions on -it models come back empty
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        return 200, {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self._usage(8, 1),
            "kv_transfer_params": None,
        }


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAI
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: latencies stay honest

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()}
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        body: Any = None
        status: int
        out: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            status, out = FakeOpenAI._error(400, "BadRequestError", "Invalid JSON body")
        else:
            status, out = self.owner.handle(self.command, path, headers, body)
        with self.owner._lock:
            self.owner.requests.append(RecordedRequest(self.command, path, headers, body, status))
        data = out if isinstance(out, bytes) else json.dumps(out).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running ``FakeOpenAI``; point clients at ``.base_url`` with key ``.api_key``."""
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
