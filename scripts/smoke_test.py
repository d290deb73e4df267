"""Smoke-test a tpu-vllm stack's endpoint the way its consumers use it: chat and a tool call.

`pulumi up` checks the server from the node itself; other services rely on the exported
contract working from *their* network. Chat, not ``/v1/completions``, which returns an empty
string on ``-it`` models (seed 000 §1.4) and looks like a broken deploy. There is no flag for
the key: argv is visible in ``ps``. What passes: docs/operations.md "Smoke test".
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
from requests.auth import AuthBase

from components.messages import operator_line
from scripts import pulumi_cli
from scripts.remote.wait_ready import (
    CHAT_MAX_TOKENS,
    CHAT_PROMPT,
    TOOL_ARGUMENT,
    TOOL_MAX_TOKENS,
    TOOL_NAME,
    TOOL_PROMPT,
    TOOLS,
)

PROG = "smoke_test"
API_KEY_ENV = "TPU_VLLM_API_KEY"
DEFAULT_TIMEOUT = 60.0
CONNECT_TIMEOUT_MAX = 10.0
PULUMI_TIMEOUT = 120.0
MAX_KEY_BYTES = 4096
SHOW_CHARS = 80


_STACK_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")


class SetupError(Exception):
    """A problem to fix before anything can be tested (exit 2)."""


def log(message: str) -> None:
    print(operator_line(PROG, message), file=sys.stderr, flush=True)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def show(text: object, limit: int = SHOW_CHARS) -> str:
    """Server output is untrusted and may be long; a non-string shows as JSON (``null``)."""
    value = text if isinstance(text, str) else json.dumps(text, default=str)
    if len(value) > limit:
        value = value[:limit] + "..."
    return json.dumps(value, ensure_ascii=False) if isinstance(text, str) else value


# --------------------------------------------------------------------------------------------
# Where to test, and with which key.


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    api_key: str
    stack: str | None
    expires_at: str | None = None


def stack_outputs(stack: str) -> Mapping[str, Any]:
    """Secrets in plain text, read from the pulumi CLI's stdout: never on a command line."""
    try:
        return pulumi_cli.stack_outputs(stack, show_secrets=True, timeout=PULUMI_TIMEOUT)
    except pulumi_cli.PulumiCliError as error:
        hint = (
            f"or pass --base-url and --model with the API key in ${API_KEY_ENV} or on stdin"
            if "not on PATH" in str(error)
            else "run it from the project, logged in to the stack's backend: `pulumi stack ls`"
        )
        raise SetupError(f"{error} ({hint})") from None


def _output(outputs: Mapping[str, Any], name: str, stack: str) -> str:
    value = outputs.get(name)
    if value == "[secret]":
        raise SetupError(f"stack {stack}: output {name} came back masked despite --show-secrets")
    if not isinstance(value, str) or not value.strip():
        raise SetupError(
            f"stack {stack} has no {name} output: the endpoint is exported once the server "
            f"answered /health and /v1/models; run `pulumi up -s {stack}`"
        )
    return value.strip()


def target_from_stack(stack: str, base_url: str | None, model: str | None) -> Target:
    outputs = stack_outputs(stack)
    if not outputs:
        raise SetupError(
            f"stack {stack} has no outputs: it has not been deployed (or the last `pulumi up` "
            f"failed); run `pulumi up -s {stack}`"
        )
    expires_at = outputs.get("expires_at")
    return Target(
        base_url=base_url or _output(outputs, "openai_base_url", stack),
        model=model or _output(outputs, "model", stack),
        api_key=_output(outputs, "api_key", stack),
        stack=stack,
        expires_at=expires_at if isinstance(expires_at, str) else None,
    )


def read_api_key() -> str:
    """``$TPU_VLLM_API_KEY``, else stdin (a hidden prompt on a terminal)."""
    key = os.environ.get(API_KEY_ENV, "")
    if not key:
        stdin = sys.stdin
        if stdin is None:
            key = ""
        elif stdin.isatty():
            try:
                key = getpass.getpass("vLLM API key (input hidden): ")
            except EOFError:
                key = ""
        else:
            key = stdin.readline(MAX_KEY_BYTES)
    key = key.strip()
    if not key:
        raise SetupError(
            f"no API key: set {API_KEY_ENV} or pipe it in, e.g. "
            "`pulumi stack output api_key --show-secrets -s STACK | python -m scripts.smoke_test "
            "--base-url URL --model M`"
        )
    if not all(33 <= ord(c) < 127 for c in key):
        raise SetupError("the API key contains spaces or non-ASCII characters; check its source")
    return key


def check_base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SetupError(f"base URL {url!r} is not http(s)://HOST:PORT/v1")
    return url.rstrip("/")


def resolve_target(args: argparse.Namespace) -> Target:
    if args.stack is not None and not _STACK_NAME.match(args.stack):
        raise SetupError(f"{args.stack!r} is not a stack name")
    if args.base_url and args.model:
        target = Target(args.base_url, args.model, read_api_key(), args.stack)
    elif args.stack:
        target = target_from_stack(args.stack, args.base_url, args.model)
    else:
        raise SetupError(
            "name a STACK (its outputs give URL, model and key), or pass both --base-url and "
            f"--model (key in ${API_KEY_ENV} or on stdin)"
        )
    if not target.api_key.isascii() or any(c.isspace() for c in target.api_key):
        raise SetupError("the api_key output contains spaces or non-ASCII characters")
    return Target(
        check_base_url(target.base_url),
        target.model,
        target.api_key,
        target.stack,
        target.expires_at,
    )


# --------------------------------------------------------------------------------------------
# The checks.


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    seconds: float | None
    detail: str
    # The endpoint itself is unusable: the other checks would fail the same way, so are skipped.
    fatal: bool = False


class _Bearer(AuthBase):
    """An explicit auth object stops requests from using credentials from ~/.netrc instead."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.key}"
        return request


def _error_message(response: requests.Response) -> str:
    """vLLM's ``{"error": ...}``, FastAPI's ``{"detail"}``, else the start of the body."""
    try:
        payload = response.json()
    except ValueError:
        return one_line(response.text[:200]) or response.reason or ""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return one_line(error["message"])
        for value in (error, payload.get("message"), payload.get("detail")):
            if isinstance(value, str) and value:
                return one_line(value)
    return one_line(json.dumps(payload)[:200])


class Tester:
    def __init__(self, target: Target, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self.session = requests.Session()
        self.session.auth = _Bearer(target.api_key)
        self.session.headers["User-Agent"] = "tpu-vllm-smoke-test"

    @property
    def endpoint(self) -> str:
        parts = urllib.parse.urlsplit(self.target.base_url)
        return f"{parts.scheme}://{parts.netloc}"

    def _stack_flag(self) -> str:
        return f" -s {self.target.stack}" if self.target.stack else ""

    def _unreachable_hint(self) -> str:
        hint = (
            "check that tpu-vllm:access.allowedCidrs includes your public address (`pulumi "
            f"config get --path tpu-vllm:access.allowedCidrs{self._stack_flag()}`) and that the "
            f"server at {self.endpoint} is up"
        )
        if self.target.expires_at:
            try:
                expiry = datetime.fromisoformat(self.target.expires_at.replace("Z", "+00:00"))
            except ValueError:
                expiry = None
            if expiry is not None and expiry.tzinfo and expiry <= datetime.now(UTC):
                hint += (
                    f"; the flex-start run ended at {self.target.expires_at}: renew with "
                    f"`pulumi up --refresh{self._stack_flag()}`"
                )
        return hint

    def post(
        self, name: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, float, Result | None]:
        """The parsed answer, or a failed ``Result``."""
        url = f"{self.target.base_url}/chat/completions"
        connect = min(self.timeout, CONNECT_TIMEOUT_MAX)
        started = time.monotonic()
        try:
            response = self.session.post(url, json=body, timeout=(connect, self.timeout))
        except requests.exceptions.ConnectTimeout:
            took = time.monotonic() - started
            why = f"no connection to {self.endpoint} within {connect:g} s (a firewall drops it?)"
            return None, took, Result(name, False, took, f"{why}: {self._unreachable_hint()}", True)
        except requests.exceptions.ReadTimeout:
            took = time.monotonic() - started
            detail = (
                f"connected to {self.endpoint} but no answer within {self.timeout:g} s: the "
                "server is busy or stuck (still compiling?); raise --timeout or read "
                "`sudo docker logs tpu-vllm` on the node"
            )
            return None, took, Result(name, False, took, detail, True)
        except requests.exceptions.ConnectionError as error:
            took = time.monotonic() - started
            text = str(error)
            if "refused" in text.lower():
                why = f"connection to {self.endpoint} refused"
            elif "resolve" in text.lower() or "name or service" in text.lower():
                why = f"cannot resolve {urllib.parse.urlsplit(url).hostname}"
            else:
                why = f"cannot connect to {self.endpoint} ({type(error).__name__})"
            return None, took, Result(name, False, took, f"{why}: {self._unreachable_hint()}", True)
        except requests.exceptions.RequestException as error:
            took = time.monotonic() - started
            return None, took, Result(name, False, took, f"request failed: {type(error).__name__}")
        took = time.monotonic() - started

        status = response.status_code
        if status == 401:
            if self.target.stack:
                cause = (
                    f"the api_key output of stack {self.target.stack}; it does not match the key "
                    "vLLM was started with"
                )
            else:
                cause = (
                    f"the key given (${API_KEY_ENV} or stdin); it is not the stack's current "
                    "api_key output, the key vLLM was started with"
                )
            detail = (
                f"401 Unauthorized: the server rejected {cause} (e.g. the key was rotated "
                "since; a renewal never changes it); re-read it with `pulumi stack output api_key "
                f"--show-secrets -s {self.target.stack or 'STACK'}`"
            )
            return None, took, Result(name, False, took, detail, True)
        if status == 404:
            message = _error_message(response)
            if "model" in message.lower():
                detail = (
                    f"404 {message} The model output (--model {self.target.model}) is not what "
                    f"the server serves; GET {self.target.base_url}/models lists it"
                )
            else:
                detail = (
                    f"404 {message} at {url}: the base URL must be the openai_base_url output "
                    "(ending in /v1)"
                )
            return None, took, Result(name, False, took, detail, True)
        if status != 200:
            return (
                None,
                took,
                Result(name, False, took, f"HTTP {status}: {_error_message(response)}"),
            )
        try:
            payload = response.json()
        except ValueError:
            return (
                None,
                took,
                Result(name, False, took, f"answer is not JSON: {show(response.text)}"),
            )
        if not isinstance(payload, dict):
            return None, took, Result(name, False, took, "answer is not a JSON object")
        return payload, took, None

    @staticmethod
    def _first_choice(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | str:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return "the answer has no choices"
        message = choices[0].get("message")
        if not isinstance(message, dict):
            return "choices[0] has no message"
        return choices[0], message

    def _ask(
        self, name: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], float] | Result:
        payload, took, failure = self.post(name, body)
        if failure is not None or payload is None:
            return failure or Result(name, False, took, "no answer")
        first = self._first_choice(payload)
        if isinstance(first, str):
            return Result(name, False, took, first)
        return first[0], first[1], took

    def chat(self) -> Result:
        name = "chat"
        body = {
            "model": self.target.model,
            "messages": [{"role": "user", "content": CHAT_PROMPT}],
            "max_tokens": CHAT_MAX_TOKENS,
            "temperature": 0,
        }
        asked = self._ask(name, body)
        if isinstance(asked, Result):
            return asked
        choice, message, took = asked
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            return Result(name, True, took, show(content.strip()))
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        detail = f"choices[0].message.content is empty ({show(content)})"
        if isinstance(reasoning, str) and reasoning.strip():
            detail += (
                f"; the reasoning parser put all {len(reasoning)} characters in "
                f"message.reasoning: {show(reasoning, 40)}"
            )
        if choice.get("finish_reason") == "length":
            detail += f"; stopped at max_tokens={CHAT_MAX_TOKENS}"
        return Result(name, False, took, detail)

    def tool_call(self) -> Result:
        name = "tool-call"
        body = {
            "model": self.target.model,
            "messages": [{"role": "user", "content": TOOL_PROMPT}],
            "tools": TOOLS,
            "tool_choice": "auto",
            "max_tokens": TOOL_MAX_TOKENS,
            "temperature": 0,
        }
        asked = self._ask(name, body)
        if isinstance(asked, Result):
            return asked
        choice, message, took = asked
        finish_reason = choice.get("finish_reason")
        calls = message.get("tool_calls")
        if not isinstance(calls, list) or not calls:
            return Result(
                name,
                False,
                took,
                f"no tool_calls in the answer (finish_reason {show(finish_reason)}, content "
                f"{show(message.get('content'), 60)}): the model did not call {TOOL_NAME} or the "
                "server's --tool-call-parser did not recognise the call",
            )
        call: dict[str, Any] = calls[0] if isinstance(calls[0], dict) else {}
        raw_function = call.get("function")
        function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        problems: list[str] = []
        called = function.get("name")
        if called != TOOL_NAME:
            problems.append(f"called {show(called)}, expected {show(TOOL_NAME)}")
        arguments = function.get("arguments")
        shown_args = ""
        if not isinstance(arguments, str):
            problems.append(
                f"arguments are {type(arguments).__name__}, not a JSON string: "
                f"{show(arguments, 60)}"
            )
        else:
            try:
                parsed = json.loads(arguments)
            except ValueError:
                problems.append(f"arguments are not JSON: {show(arguments)}")
            else:
                shown_args = json.dumps(parsed, ensure_ascii=False)[:SHOW_CHARS]
                if not isinstance(parsed, dict):
                    problems.append(f"arguments are not a JSON object: {shown_args}")
                elif TOOL_ARGUMENT not in parsed:
                    problems.append(f"arguments have no {show(TOOL_ARGUMENT)}: {shown_args}")
                elif not isinstance(parsed[TOOL_ARGUMENT], str) or not parsed[TOOL_ARGUMENT]:
                    problems.append(
                        f"{show(TOOL_ARGUMENT)} is not a non-empty string: {shown_args}"
                    )
        if call.get("type") != "function":
            problems.append(
                f"tool_calls[0].type is {show(call.get('type'))}, expected {show('function')}"
            )
        if finish_reason != "tool_calls":
            problems.append(
                f"finish_reason is {show(finish_reason)}, expected {show('tool_calls')}"
            )
        if problems:
            return Result(name, False, took, "; ".join(problems))
        return Result(name, True, took, f"{TOOL_NAME}({shown_args})")


# --------------------------------------------------------------------------------------------


def format_result(result: Result) -> str:
    if result.seconds is None:
        return f"SKIP {result.name}: {result.detail}"
    status = "PASS" if result.passed else "FAIL"
    separator = " " if result.passed else ": "
    return f"{status} {result.name} {result.seconds:.2f} s{separator}{result.detail}"


def run_checks(target: Target, timeout: float, emit: Callable[[str], None]) -> bool:
    tester = Tester(target, timeout)
    where = f" (stack {target.stack})" if target.stack else ""
    emit(f"smoke test of {target.model} at {target.base_url}{where}")
    checks: list[tuple[str, Callable[[], Result]]] = [
        ("chat", tester.chat),
        ("tool-call", tester.tool_call),
    ]
    results: list[Result] = []
    blocked: Result | None = None
    for name, check in checks:
        if blocked is not None:
            result = Result(
                name, False, None, f"not run: {blocked.name} could not use the endpoint"
            )
        else:
            result = check()
            if result.fatal:
                blocked = result
        results.append(result)
        emit(format_result(result))
    failed = [r.name for r in results if not r.passed]
    if failed:
        emit(f"FAILED: {len(failed)} of {len(results)} checks did not pass ({', '.join(failed)})")
    else:
        emit(f"OK: {len(results)} of {len(results)} checks passed")
    return not failed


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.smoke_test",
        description=(
            "Send one chat request and one tool call to a tpu-vllm endpoint and report PASS or "
            "FAIL for each. With STACK, the URL, model and API key come from `pulumi stack "
            "output`; with --base-url and --model, the key comes from "
            f"${API_KEY_ENV} or stdin (there is no flag for it)."
        ),
        epilog="Exit status: 0 all passed, 1 a check failed, 2 a problem to fix before testing.",
    )
    parser.add_argument("stack", nargs="?", metavar="STACK", help="Pulumi stack (e.g. v5e1)")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI base URL, e.g. http://IP:8000/v1 (default: the openai_base_url output; "
        "with STACK and without --model, only the URL is overridden, e.g. for an SSH tunnel)",
    )
    parser.add_argument("--model", metavar="M", help="model id (default: the model output)")
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds to wait for each answer (default: %(default)g)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = resolve_target(args)
    except SetupError as error:
        log(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 130

    def emit(line: str) -> None:
        # Belt and braces: nothing the server or a library says may print the key.
        print(line.replace(target.api_key, "***"), flush=True)

    try:
        ok = run_checks(target, args.timeout, emit)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
