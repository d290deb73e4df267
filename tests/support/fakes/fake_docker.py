#!/usr/bin/env python3
"""Fake ``docker`` CLI + daemon, fake ``sudo``, and the "container" they start, for SSH tests.

Why this exists: the tpu-vllm remote scripts run ``sudo docker run ...`` on a TPU VM and judge
readiness from ``docker logs``/``docker inspect``. CI has no Docker engine, so this one file
stands in for the CLI *and* the daemon. Daemon state lives in the directory named by
``FAKE_DOCKER_STATE``; a started container is a detached supervisor process that replays a
reconstructed vLLM boot log (``tests/support/fixtures/vllm_logs``) at a chosen pace and, once the
log says ``Application startup complete.``, answers HTTP like vLLM's OpenAI server. Every ``docker``
and ``sudo`` invocation is appended to ``invocations.jsonl`` (argv, full environment, cwd) so tests
can prove that a secret never reaches a command line or an environment.

Messages, output shapes and exit codes were checked against the real docker CLI 28.2.2 (run
against a loopback stub daemon): e.g. ``rm -f`` of a missing container prints the daemon error to
stderr and exits 0, ``inspect`` of a missing object prints ``[]`` then ``Error: No such object``
and exits 1, a name conflict or unknown ``run`` flag exits 125, ``permission denied`` on ``run``
exits 126. The daemon socket is root-only: ``docker`` without ``sudo`` fails with permission
denied unless the test puts the user in the docker group. ``docker logs -f`` ends only when the
container stops (or restarts), so ``docker logs -f C | grep -m1 READY`` hangs after a ready
line, exactly as on the VM.

State directory layout (tests normally use ``tests.support.fakes.ssh_host.FakeDocker`` instead)::

    invocations.jsonl      one JSON object per docker/sudo call: tool, argv, env, cwd, uid, time
    images.json            {"images": [...]} present images (``docker pull`` adds)
    cloud_logging.jsonl    what the gcplogs log driver shipped (one Cloud Logging entry a line)
    daemon.json            knobs: {"require_sudo": true, "pull_errors": {"img:tag": "message"},
                           "gcplogs_error": why Cloud Logging refuses the driver,
                           "gcplogs_failures": for how many starts (default: all),
                           "pull_seconds": how long `docker pull` of a missing image takes}
    scenario.json          scenario for the next ``docker run`` (object), or a list: the Nth run
                           uses item N, the last item repeats. Keys: log, speed, exit_at,
                           exit_code, restart_log, health_status (see ``Scenario`` in
                           ssh_host.py)
    run_count              how many ``docker run`` calls consumed a scenario so far
    containers/<id>/       config.json, state.json, <id>-json.log (json-file driver lines),
                           control.json (runtime knob written by tests), supervisor.log

Log fixture format: ``<seconds since container start>\\t<1|2|@>\\t<text>``; 1 = stdout,
2 = stderr, ``@`` = directive (``exit N``: the container exits with code N); ``#`` starts a
comment line; ``${PORT}`` in a text becomes the ``--port`` given to ``vllm serve``. Replay waits
``seconds / speed`` wall-clock seconds (see tests/support/fixtures/vllm_logs/README.md).

Runs as a plain script under whichever python3 the harness pinned (stdlib only, Python 3.9+).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import http.server
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

DOCKER_VERSION = "28.2.2"
DOCKER_BUILD = "e6534b4"
VLLM_VERSION = "0.26.1rc1.dev125+ga7a204cc6"
READY_MARKER = "Application startup complete."
API_KEY_MOUNT = "/run/secrets/vllm_api_key"
DEFAULT_VLLM_PORT = 8000
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
SOCKET = "/var/run/docker.sock"
# What a vllm/vllm-tpu image (python:3.12-slim based) contributes to Config.Env.
IMAGE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "PYTHON_VERSION=3.12.11",
]
IMAGE_CMD = ["/bin/bash"]
# Debian's sudoers secure_path: what PATH becomes under real sudo.
SUDO_SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HERE = Path(__file__).resolve().parent
POLL = 0.02

JSONDict = dict[str, Any]


# --------------------------------------------------------------------------------------------
# small helpers


def now_ns() -> int:
    return time.time_ns()


def rfc3339nano(ns: int | None = None) -> str:
    """Format like Go's time.RFC3339Nano in UTC (trailing zeros of the fraction trimmed)."""
    if ns is None:
        ns = now_ns()
    secs, frac = divmod(ns, 10**9)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_timestamp(text: str) -> float | None:
    """Parse an RFC 3339 timestamp (what json-file logs and ``--since`` use) to epoch seconds."""
    m = _RFC3339_RE.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, sec, frac, zone = m.groups()
    import calendar

    base = calendar.timegm(
        (int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(sec or 0), 0, 0, 0)
    )
    value = float(base) + (float("0." + frac) if frac else 0.0)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        value -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return value


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float | None:
    """Parse a Go duration such as ``10m`` or ``1h30m`` into seconds."""
    if not text or _DURATION_RE.sub("", text) != "":
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_RE.findall(text))


def parse_since(text: str, now: float) -> float | None:
    """``docker logs --since/--until``: RFC 3339, Unix seconds, or a duration before now."""
    duration = parse_go_duration(text)
    if duration is not None:
        return now - duration
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    return parse_timestamp(text)


def human_duration(seconds: float) -> str:
    """go-units HumanDuration, as used by ``docker ps`` STATUS/CREATED columns."""
    secs = int(seconds)
    if secs < 1:
        return "Less than a second"
    if secs == 1:
        return "1 second"
    if secs < 60:
        return f"{secs} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = int(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{hours // 24 // 365} years"


_RAM_RE = re.compile(r"^(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$")


def ram_in_bytes(text: str) -> int:
    """docker's units.RAMInBytes: binary multiples, ``10gb`` == 10 GiB."""
    m = _RAM_RE.match(text)
    if not m:
        suffix = re.sub(r"^[\d.]+ ?", "", text)
        raise ValueError(f"invalid suffix: '{suffix}'")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
    return int(float(m.group(1)) * mult[(m.group(2) or "").lower()])


def normalize_image(ref: str) -> str:
    """Familiar image reference: no ``docker.io/`` or ``library/``; ``:latest`` when untagged."""
    name = ref
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if name.startswith("library/"):
        name = name[len("library/") :]
    last = name.rsplit("/", 1)[-1]
    if "@" not in name and ":" not in last:
        name += ":latest"
    return name


def image_id(ref: str) -> str:
    return "sha256:" + hashlib.sha256(("image:" + normalize_image(ref)).encode()).hexdigest()


def go_json(value: Any) -> str:
    """Go's json.Marshal: compact, with <, > and & escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_json_indent(value: Any) -> str:
    """Go's json.MarshalIndent with four spaces, as ``docker inspect`` prints."""
    text = json.dumps(value, indent=4, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_quote(text: str) -> str:
    """Approximation of strconv.Quote for printable text."""
    return json.dumps(text, ensure_ascii=False)


def pid_alive(pid: int, marker: str = "") -> bool:
    """True if ``pid`` runs (not a zombie) and, if given, its cmdline contains ``marker``."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        if marker:
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        return True
    except (OSError, IndexError):
        return False


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# The privileged half of the fake VM (tests/support/fakes/root_helper.py, served by the test process
# when it runs as root): the container's writes and the fake sudo's file-ownership commands run as
# real root through it, as they do on a TPU VM. Absent (tests not run as root), both run as the
# SSH user, as before.
ROOT_HELPER_SOCKET = "root-helper.sock"
#: The commands the fake sudo runs as root; any other (docker included) runs as the SSH user.
ROOT_HELPER_TOOLS = frozenset(
    {"chown", "chgrp", "chmod", "mkdir", "install", "touch", "cp", "mv", "rm", "rmdir", "stat"}
)


def root_helper_request(
    state_root: Path, request: JSONDict, fds: Sequence[int] = ()
) -> JSONDict | None:
    """Send one request to the root helper of this fake VM; None when there is none."""
    path = state_root / ROOT_HELPER_SOCKET
    if not path.exists():
        return None
    body = json.dumps(request).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        socket.send_fds(sock, [struct.pack(">Q", len(body)) + body], list(fds))
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    answer = json.loads(b"".join(chunks) or b"{}")
    if answer.get("error"):
        raise OSError(f"root helper: {answer['error']}")
    return dict(answer)


def write_as_root(state_root: Path, path: Path, data: bytes) -> bool:
    """Write `path` as root (dirs 0755, file 0644); False when this fake VM has no root helper."""
    request = {"op": "write", "path": str(path), "data": base64.b64encode(data).decode()}
    return root_helper_request(state_root, request) is not None


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except json.JSONDecodeError:
        # A writer is mid-way (should not happen with atomic replace); treat as absent.
        return default


def fixtures_dir() -> Path:
    env = os.environ.get("FAKE_VLLM_LOGS_DIR")
    return Path(env) if env else HERE.parent / "fixtures" / "vllm_logs"


# --------------------------------------------------------------------------------------------
# errors


class CliError(Exception):
    """A docker CLI failure: ``message`` goes to stderr, ``stdout`` first to stdout."""

    def __init__(self, message: str, code: int = 1, stdout: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.stdout = stdout


def usage_error(cmd: str, usage: str, problem: str) -> CliError:
    """Flag-parsing errors: docker prints the problem, the usage line, and exits 125."""
    return CliError(
        f"{problem}\n\nUsage:  docker {cmd} {usage}\n\n"
        f"Run 'docker {cmd} --help' for more information",
        125,
    )


def arg_count_error(cmd: str, usage: str, at_least: bool) -> CliError:
    """Wrong positional count: docker 28 wording differs between 'at least 1' and '1'."""
    if at_least:
        return CliError(
            f"docker: 'docker {cmd}' requires at least 1 argument\n\nUsage:  docker {cmd} {usage}"
            f"\n\nSee 'docker {cmd} --help' for more information",
            1,
        )
    return CliError(
        f"docker: 'docker {cmd}' requires 1 argument\n\nUsage:  docker {cmd} {usage}"
        f"\n\nRun 'docker {cmd} --help' for more information",
        1,
    )


# --------------------------------------------------------------------------------------------
# generic flag parser (pflag semantics: --x=v, --x v, -x v, -xv, -abc bool clusters)


class FlagSpec(NamedTuple):
    long: str
    short: str
    takes_value: bool


def make_specs(
    specs: Sequence[tuple[str, str, bool]],
) -> tuple[dict[str, FlagSpec], dict[str, FlagSpec]]:
    longs: dict[str, FlagSpec] = {}
    shorts: dict[str, FlagSpec] = {}
    for long, short, takes_value in specs:
        spec = FlagSpec(long, short, takes_value)
        longs[long] = spec
        if short:
            shorts[short] = spec
    return longs, shorts


def parse_bool(text: str) -> bool | None:
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def parse_flags(
    cmd: str,
    usage: str,
    args: Sequence[str],
    specs: Sequence[tuple[str, str, bool]],
    *,
    interspersed: bool,
    aliases: dict[str, str] | None = None,
) -> tuple[list[tuple[str, Any]], list[str]]:
    """Return ``([(long_name, value), ...], positionals)`` or raise a docker-shaped CliError."""
    longs, shorts = make_specs([*specs, ("help", "", False)])
    aliases = aliases or {}
    flags: list[tuple[str, Any]] = []
    positionals: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positionals.extend(args[i + 1 :])
            break
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            name = aliases.get(name, name)
            spec = longs.get(name)
            if spec is None:
                raise usage_error(cmd, usage, f"unknown flag: --{name}")
            if spec.takes_value:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise usage_error(cmd, usage, f"flag needs an argument: --{name}")
                    value = args[i]
                flags.append((spec.long, value))
            else:
                parsed = parse_bool(value) if eq else True
                if parsed is None:
                    raise usage_error(
                        cmd,
                        usage,
                        f'invalid argument "{value}" for "--{name}" flag: strconv.ParseBool: '
                        f'parsing "{value}": invalid syntax',
                    )
                flags.append((spec.long, parsed))
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                letter = arg[j]
                spec = shorts.get(letter)
                if spec is None:
                    raise usage_error(cmd, usage, f"unknown shorthand flag: '{letter}' in {arg}")
                if spec.takes_value:
                    rest = arg[j + 1 :]
                    if rest.startswith("="):
                        rest = rest[1:]
                    if not rest:
                        i += 1
                        if i >= len(args):
                            raise usage_error(
                                cmd, usage, f"flag needs an argument: '{letter}' in -{letter}"
                            )
                        rest = args[i]
                    flags.append((spec.long, rest))
                    break
                flags.append((spec.long, True))
                j += 1
        else:
            if not interspersed:
                positionals.extend(args[i:])
                break
            positionals.append(arg)
        i += 1
    if any(name == "help" for name, _ in flags):
        raise CliError(f"Usage:  docker {cmd} {usage}", 0)
    return flags, positionals


def flag_last(flags: Sequence[tuple[str, Any]], name: str, default: Any = None) -> Any:
    value = default
    for key, val in flags:
        if key == name:
            value = val
    return value


def flag_all(flags: Sequence[tuple[str, Any]], name: str) -> list[Any]:
    return [val for key, val in flags if key == name]


# --------------------------------------------------------------------------------------------
# Go text/template subset (what ``docker inspect/ps --format`` scripts use)


class TemplateError(Exception):
    """Raised with docker's exact wording; ``parse`` errors exit 64, execution errors 1."""

    def __init__(self, message: str, parse: bool) -> None:
        super().__init__(message)
        self.parse = parse


# Go types of nil fields decide how ``{{.X}}`` prints them.
_NIL_AS_SLICE = {
    "Args", "Binds", "Cmd", "Entrypoint", "Env", "CapAdd", "CapDrop", "Dns", "DnsOptions",
    "DnsSearch", "ExtraHosts", "GroupAdd", "Links", "VolumesFrom", "Devices", "ExecIDs",
    "Mounts", "OnBuild", "RepoTags", "RepoDigests", "Layers", "Tmpfs",
}  # fmt: skip
_MAP_KEYS = {"Labels", "Volumes", "ExposedPorts", "PortBindings", "Networks", "Ports", "Options"}


def go_format(value: Any, key: str = "") -> str:
    """fmt %v of a docker API value, as text/template prints it."""
    if value is None:
        if key in _NIL_AS_SLICE:
            return "[]"
        if key in _MAP_KEYS:
            return "map[]"
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if isinstance(value, dict):
        if key in _MAP_KEYS or key == "":
            if key == "" and not value:
                return "map[]"
            if key in _MAP_KEYS:
                return (
                    "map[" + " ".join(f"{k}:{go_format(value[k], k)}" for k in sorted(value)) + "]"
                )
        return "{" + " ".join(go_format(v, k) for k, v in value.items()) + "}"
    return str(value)


def go_truth(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, (bool, int, float, str, list, dict)):
        return bool(value)
    return True


class _Text(NamedTuple):
    text: str


class _Action(NamedTuple):
    pipeline: str
    pos: int


class _Block(NamedTuple):
    kind: str  # "range" | "if" | "with"
    pipeline: str
    pos: int
    body: list[Any]
    else_body: list[Any]
    variables: tuple[str, ...]


_TOKEN_RE = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<raw>`[^`]*`)|(?P<pipe>\|)|(?P<paren>[()])'
    r"|(?P<word>[^\s|()]+))"
)


class GoTemplate:
    """A small, strict interpreter for the Go template features docker users rely on."""

    FUNCS = (
        "json", "println", "print", "printf", "len", "index", "join", "split", "lower", "upper",
        "title", "truncate", "pad", "not", "and", "or", "eq", "ne",
    )  # fmt: skip

    def __init__(self, source: str) -> None:
        self.source = source
        self.tree = self._parse(source)

    # -- parsing --------------------------------------------------------------------------
    def _parse(self, src: str) -> list[Any]:
        root: list[Any] = []
        stack: list[tuple[list[Any], _Block | None, bool]] = [(root, None, False)]
        i = 0
        while i < len(src):
            start = src.find("{{", i)
            if start < 0:
                stack[-1][0].append(_Text(src[i:]))
                break
            text = src[i:start]
            end = src.find("}}", start + 2)
            if end < 0:
                line = src.count("\n", 0, start) + 1
                raise TemplateError(f"template: :{line}: unclosed action", True)
            inner = src[start + 2 : end]
            inner_pos = start + 2
            if inner.startswith("- ") or inner == "-":
                text = text.rstrip()
                inner = inner[1:]
                inner_pos += 1
            trim_right = inner.endswith(" -")
            if trim_right:
                inner = inner[:-1]
            if text:
                stack[-1][0].append(_Text(text))
            i = end + 2
            if trim_right:
                while i < len(src) and src[i] in " \t\r\n":
                    i += 1
            stripped = inner.strip()
            lead = len(inner) - len(inner.lstrip())
            pos = inner_pos + lead
            if stripped.startswith("/*"):
                continue
            word = stripped.split(None, 1)[0] if stripped else ""
            rest = stripped[len(word) :].strip()
            if word in ("range", "if", "with"):
                variables: tuple[str, ...] = ()
                m = re.match(r"^((?:\$\w*\s*,\s*)?\$\w*)\s*:=\s*(.*)$", rest)
                if m:
                    variables = tuple(v.strip() for v in m.group(1).split(","))
                    rest = m.group(2)
                new_block = _Block(word, rest, pos + len(word) + 1, [], [], variables)
                stack[-1][0].append(new_block)
                stack.append((new_block.body, new_block, False))
            elif word == "else":
                _body, open_block, in_else = stack[-1]
                if open_block is None or in_else:
                    line = src.count("\n", 0, start) + 1
                    raise TemplateError(f"template: :{line}: unexpected {{{{else}}}}", True)
                stack[-1] = (open_block.else_body, open_block, True)
            elif word == "end":
                if len(stack) == 1:
                    line = src.count("\n", 0, start) + 1
                    raise TemplateError(f"template: :{line}: unexpected {{{{end}}}}", True)
                stack.pop()
            elif not stripped:
                line = src.count("\n", 0, start) + 1
                raise TemplateError(f"template: :{line}: missing value for command", True)
            else:
                stack[-1][0].append(_Action(stripped, pos))
        if len(stack) > 1:
            line = src.count("\n") + 1
            raise TemplateError(f"template: :{line}: unexpected EOF", True)
        return root

    # -- execution ------------------------------------------------------------------------
    def execute(self, data: Any) -> str:
        out: list[str] = []
        self._run(self.tree, data, {"$": data}, out)
        return "".join(out)

    def _where(self, pos: int) -> str:
        line = self.source.count("\n", 0, pos) + 1
        col = pos - (self.source.rfind("\n", 0, pos) + 1)
        return f"template: :{line}:{col}"

    def _run(self, nodes: list[Any], dot: Any, scope: dict[str, Any], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Action):
                value, key = self._pipeline(node.pipeline, node.pos, dot, scope)
                out.append(go_format(value, key))
            elif isinstance(node, _Block):
                value, _ = self._pipeline(node.pipeline, node.pos, dot, scope)
                if node.kind == "range":
                    items: list[tuple[Any, Any]]
                    if isinstance(value, dict):
                        items = [(k, value[k]) for k in sorted(value)]
                    elif isinstance(value, list):
                        items = list(enumerate(value))
                    elif value is None:
                        items = []
                    else:
                        raise TemplateError(
                            f'{self._where(node.pos)}: executing "" at <{node.pipeline}>: '
                            f"range can't iterate over {go_format(value)}",
                            False,
                        )
                    if not items:
                        self._run(node.else_body, dot, scope, out)
                    for idx, item in items:
                        inner = dict(scope)
                        if len(node.variables) == 1:
                            inner[node.variables[0]] = item
                        elif len(node.variables) == 2:
                            inner[node.variables[0]] = idx
                            inner[node.variables[1]] = item
                        self._run(node.body, item, inner, out)
                elif node.kind == "if":
                    self._run(node.body if go_truth(value) else node.else_body, dot, scope, out)
                elif go_truth(value):  # with
                    inner = dict(scope)
                    if node.variables:
                        inner[node.variables[0]] = value
                    self._run(node.body, value, inner, out)
                else:
                    self._run(node.else_body, dot, scope, out)

    def _tokens(self, text: str, base: int) -> list[tuple[str, str, int]]:
        tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if not m or m.end() == pos:
                break
            kind = m.lastgroup or "word"
            tokens.append((kind, m.group(kind), base + m.start(kind)))
            pos = m.end()
        return tokens

    def _pipeline(self, text: str, pos: int, dot: Any, scope: dict[str, Any]) -> tuple[Any, str]:
        commands: list[list[tuple[str, str, int]]] = [[]]
        depth = 0
        for tok in self._tokens(text, pos):
            if tok[0] == "pipe" and depth == 0:
                commands.append([])
                continue
            if tok[0] == "paren":
                depth += 1 if tok[1] == "(" else -1
            commands[-1].append(tok)
        value: Any = None
        key = ""
        piped = False
        for command in commands:
            if not command:
                raise TemplateError(f"{self._where(pos)}: missing command", True)
            value, key = self._command(command, dot, scope, value if piped else None, piped)
            piped = True
        return value, key

    def _command(
        self,
        toks: list[tuple[str, str, int]],
        dot: Any,
        scope: dict[str, Any],
        piped_value: Any,
        piped: bool,
    ) -> tuple[Any, str]:
        head = toks[0]
        if head[0] == "word" and head[1] in self.FUNCS:
            args = self._operands(toks[1:], dot, scope)
            if piped:
                args.append(piped_value)
            return self._call(head[1], args, head[2]), ""
        if (
            head[0] == "word"
            and re.fullmatch(r"[A-Za-z_]\w*", head[1])
            and head[1]
            not in (
                "true",
                "false",
                "nil",
            )
        ):
            raise TemplateError(f'template: :1: function "{head[1]}" not defined', True)
        if len(toks) > 1 or piped:
            raise TemplateError(
                f'{self._where(head[2])}: executing "" at <{head[1]}>: can\'t give argument '
                "to non-function " + head[1],
                False,
            )
        return self._operand(head, dot, scope)

    def _operands(
        self, toks: list[tuple[str, str, int]], dot: Any, scope: dict[str, Any]
    ) -> list[Any]:
        values: list[Any] = []
        i = 0
        while i < len(toks):
            tok = toks[i]
            if tok[0] == "paren" and tok[1] == "(":
                depth = 1
                j = i + 1
                while j < len(toks) and depth:
                    if toks[j][0] == "paren":
                        depth += 1 if toks[j][1] == "(" else -1
                    j += 1
                inner = toks[i + 1 : j - 1]
                sub_text = " ".join(t[1] for t in inner)
                values.append(self._pipeline(sub_text, tok[2] + 1, dot, scope)[0])
                i = j
                continue
            values.append(self._operand(tok, dot, scope)[0])
            i += 1
        return values

    def _operand(
        self, tok: tuple[str, str, int], dot: Any, scope: dict[str, Any]
    ) -> tuple[Any, str]:
        kind, text, pos = tok
        if kind == "str":
            return json.loads(text), ""
        if kind == "raw":
            return text[1:-1], ""
        if text in ("true", "false"):
            return text == "true", ""
        if text == "nil":
            return None, ""
        if re.fullmatch(r"-?\d+", text):
            return int(text), ""
        if re.fullmatch(r"-?\d+\.\d*", text):
            return float(text), ""
        if text.startswith("$"):
            name, _, path = text.partition(".")
            if name not in scope:
                raise TemplateError(f'template: :1: undefined variable "{name}"', True)
            base = scope[name]
            return self._fields(base, ("." + path) if path else "", pos + len(name), text)
        if text.startswith("."):
            return self._fields(dot, text, pos, text)
        raise TemplateError(f'template: :1: unexpected "{text}" in command', True)

    def _fields(self, base: Any, path: str, pos: int, shown: str) -> tuple[Any, str]:
        if path in ("", "."):
            return base, ""
        names = path[1:].split(".")
        offsets = []
        off = pos
        for name in names:
            offsets.append(off)
            off += len(name) + 1
        # Go reports the position of the second field token of a chain (quirk kept on purpose).
        where = self._where(offsets[1] if len(offsets) > 1 else offsets[0])
        value = base
        key = ""
        for name in names:
            if isinstance(value, dict):
                if name not in value:
                    raise TemplateError(
                        f'{where}: executing "" at <{shown}>: map has no entry for key "{name}"',
                        False,
                    )
                value = value[name]
                key = name
            elif value is None:
                raise TemplateError(
                    f'{where}: executing "" at <{shown}>: nil pointer evaluating '
                    f"interface {{}}.{name}",
                    False,
                )
            else:
                raise TemplateError(
                    f'{where}: executing "" at <{shown}>: can\'t evaluate field {name} in type '
                    + type(value).__name__,
                    False,
                )
        return value, key

    def _call(self, name: str, args: list[Any], pos: int) -> Any:
        def need(count: int) -> None:
            if len(args) != count:
                raise TemplateError(
                    f'{self._where(pos)}: executing "" at <{name}>: wrong number of args for '
                    f"{name}: want {count} got {len(args)}",
                    False,
                )

        if name == "json":
            need(1)
            return go_json(args[0])
        if name == "println":
            return " ".join(go_format(a) for a in args) + "\n"
        if name == "print":
            parts: list[str] = []
            for idx, arg in enumerate(args):
                if idx and not isinstance(arg, str) and not isinstance(args[idx - 1], str):
                    parts.append(" ")
                parts.append(go_format(arg))
            return "".join(parts)
        if name == "printf":
            fmt = str(args[0]) if args else ""
            rest = list(args[1:])

            def repl(m: re.Match[str]) -> str:
                verb = m.group(1)
                if verb == "%":
                    return "%"
                value = rest.pop(0) if rest else None
                if verb == "q":
                    return go_quote(go_format(value))
                return go_format(value)

            return re.sub(r"%([svdqt%])", repl, fmt)
        if name == "len":
            need(1)
            return len(args[0]) if args[0] is not None else 0
        if name == "index":
            value = args[0]
            for idx in args[1:]:
                if isinstance(value, dict):
                    value = value.get(idx, "")
                elif isinstance(value, list) and isinstance(idx, int):
                    if not 0 <= idx < len(value):
                        raise TemplateError(
                            f'{self._where(pos)}: executing "" at <index>: error calling index: '
                            f"index out of range: {idx}",
                            False,
                        )
                    value = value[idx]
                else:
                    value = None
            return value
        if name == "join":
            need(2)
            return str(args[1]).join(go_format(v) for v in (args[0] or []))
        if name == "split":
            need(2)
            return str(args[0]).split(str(args[1]))
        if name == "lower":
            need(1)
            return go_format(args[0]).lower()
        if name == "upper":
            need(1)
            return go_format(args[0]).upper()
        if name == "title":
            need(1)
            text = go_format(args[0])
            return text[:1].upper() + text[1:]
        if name == "truncate":
            need(2)
            return go_format(args[0])[: int(args[1])]
        if name == "pad":
            need(3)
            return " " * int(args[1]) + go_format(args[0]) + " " * int(args[2])
        if name == "not":
            need(1)
            return not go_truth(args[0])
        if name == "and":
            result: Any = True
            for arg in args:
                result = arg
                if not go_truth(arg):
                    break
            return result
        if name == "or":
            result = False
            for arg in args:
                result = arg
                if go_truth(arg):
                    break
            return result
        if name == "eq":
            return any(args[0] == other for other in args[1:])
        if name == "ne":
            need(2)
            return args[0] != args[1]
        raise TemplateError(f'template: :1: function "{name}" not defined', True)


def render_template(source: str, data: Any) -> str:
    return GoTemplate(source).execute(data)


# --------------------------------------------------------------------------------------------
# log fixtures


class LogEntry(NamedTuple):
    at: float
    stream: str  # "stdout" | "stderr" | "directive"
    text: str


def load_fixture(path: Path) -> list[LogEntry]:
    """Parse a ``<seconds>\\t<1|2|@>\\t<text>`` replay file (see module docstring)."""
    entries: list[LogEntry] = []
    last = 0.0
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = raw.split("\t", 2)
        if len(parts) != 3 or parts[1] not in ("1", "2", "@"):
            raise ValueError(f"{path}:{lineno}: expected '<seconds>\\t<1|2|@>\\t<text>'")
        at = float(parts[0])
        if at < last:
            raise ValueError(f"{path}:{lineno}: time {at} goes backwards (previous {last})")
        last = at
        stream = {"1": "stdout", "2": "stderr", "@": "directive"}[parts[1]]
        entries.append(LogEntry(at, stream, parts[2]))
    return entries


SAMPLE_MODEL = "google/gemma-4-31B-it"
#: The series whose value the fake servers keep current: {name: what counts it}.
COUNTED = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def metrics_page(model: str, prompt_tokens: float, generation_tokens: float) -> str:
    """GET /metrics: the vLLM 0.32 sample (tests/support/fixtures/vllm_metrics, rendered through
    vLLM's own metric definitions) with this server's model and token counters, so two scrapes show
    the tokens the fake served in between, as vLLM's counters would."""
    text = (fixtures_dir().parent / "vllm_metrics" / "v6e4_metrics.txt").read_text()
    text = text.replace(f'model_name="{SAMPLE_MODEL}"', f'model_name="{model}"')
    values = dict(zip(COUNTED, (prompt_tokens, generation_tokens), strict=True))
    lines = []
    for raw in text.splitlines():
        name = raw.split("{", 1)[0]
        counted = name in values and not raw.startswith("#")
        lines.append(f"{raw.rsplit(' ', 1)[0]} {float(values[name])}" if counted else raw)
    return "\n".join(lines) + "\n"


def resolve_fixture(name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else fixtures_dir() / name


# --------------------------------------------------------------------------------------------
# daemon state


class Daemon:
    """File-backed daemon state; every read-modify-write happens under one flock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.containers_dir = root / "containers"

    @classmethod
    def from_env(cls) -> Daemon:
        root = os.environ.get("FAKE_DOCKER_STATE")
        if not root:
            raise CliError(
                "fake docker: FAKE_DOCKER_STATE is not set (is this the test harness PATH?)", 1
            )
        path = Path(root)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with open(self.root / "lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def record(self, tool: str, argv: Sequence[str]) -> None:
        entry = {
            "tool": tool,
            "argv": list(argv),
            "env": dict(os.environ),
            "cwd": os.getcwd() if os.path.exists(".") else "",
            "uid": os.getuid(),
            "pid": os.getpid(),
            "time": rfc3339nano(),
        }
        line = json.dumps(entry) + "\n"
        with self.lock(), open(self.root / "invocations.jsonl", "a") as handle:
            handle.write(line)

    def knobs(self) -> JSONDict:
        data = read_json(self.root / "daemon.json", {})
        return data if isinstance(data, dict) else {}

    def images(self) -> list[str]:
        data = read_json(self.root / "images.json", {"images": []})
        return [normalize_image(i) for i in data.get("images", [])]

    def add_image(self, ref: str) -> None:
        with self.lock():
            images = self.images()
            if normalize_image(ref) not in images:
                images.append(normalize_image(ref))
            write_json_atomic(self.root / "images.json", {"images": images})

    def has_image(self, ref: str) -> bool:
        return normalize_image(ref) in self.images()

    def next_scenario(self, cmd: Sequence[str] = ()) -> JSONDict:
        """Consume one scenario: the Nth ``docker run`` gets list item N (last one repeats);
        a ``by_args`` rule whose words the run's command holds replaces it."""
        with self.lock():
            count_path = self.root / "run_count"
            try:
                count = int(count_path.read_text().strip() or "0")
            except (FileNotFoundError, ValueError):
                count = 0
            raw = read_json(self.root / "scenario.json", None)
            if isinstance(raw, list) and raw:
                scenario = raw[min(count, len(raw) - 1)]
            elif isinstance(raw, dict):
                scenario = raw
            else:
                scenario = {"log": "v5e1_ready.log", "speed": 1.0}
            count_path.write_text(f"{count + 1}\n")
        words = list(cmd)
        for wanted, chosen in scenario.get("by_args") or ():
            size = len(wanted)
            if any(words[i : i + size] == list(wanted) for i in range(len(words) - size + 1)):
                scenario = dict(chosen)
                break
        result = {k: v for k, v in dict(scenario).items() if k != "by_args"}
        result["run_index"] = count
        return result

    def all_containers(self) -> list[Container]:
        if not self.containers_dir.is_dir():
            return []
        found = []
        for child in self.containers_dir.iterdir():
            if (child / "config.json").exists():
                found.append(Container(self, child.name))
        found.sort(key=lambda c: c.config.get("CreatedNs", 0), reverse=True)
        return found

    def find(self, ref: str) -> Container | None:
        """Resolve like dockerd: exact id, exact name (``/``-insensitive), then unique id prefix."""
        ref = ref.strip("/") if ref.strip("/") else ref
        everything = self.all_containers()
        for c in everything:
            if c.id == ref:
                return c
        for c in everything:
            if c.name == ref:
                return c
        if ref and re.fullmatch(r"[0-9a-f]+", ref):
            matches = [c for c in everything if c.id.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
        return None


class Container:
    """One fake container: static ``config.json`` plus mutable ``state.json``."""

    def __init__(self, daemon: Daemon, cid: str) -> None:
        self.daemon = daemon
        self.id = cid
        self.dir = daemon.containers_dir / cid
        self._config: JSONDict | None = None

    @property
    def config(self) -> JSONDict:
        if self._config is None:
            self._config = read_json(self.dir / "config.json", {})
        return self._config

    @property
    def name(self) -> str:
        return str(self.config.get("Name", "")).lstrip("/")

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.id}-json.log"

    def exists(self) -> bool:
        return (self.dir / "config.json").exists()

    def raw_state(self) -> JSONDict:
        data = read_json(self.dir / "state.json", {})
        return data if isinstance(data, dict) else {}

    def state(self) -> JSONDict:
        """Current state; a supervisor that died without saying so counts as SIGKILLed (137)."""
        st = self.raw_state()
        if st.get("Running") and not pid_alive(int(st.get("Pid", 0)), self.id):
            with self.daemon.lock():
                st = self.raw_state()
                if st.get("Running") and not pid_alive(int(st.get("Pid", 0)), self.id):
                    st.update(
                        Status="exited",
                        Running=False,
                        Restarting=False,
                        Pid=0,
                        ExitCode=137 if not st.get("ExitCode") else st["ExitCode"],
                        FinishedAt=rfc3339nano(),
                    )
                    if self.exists():
                        write_json_atomic(self.dir / "state.json", st)
        return st

    def update_state(self, **changes: Any) -> JSONDict:
        with self.daemon.lock():
            st = self.raw_state()
            st.update(changes)
            if self.dir.is_dir():
                write_json_atomic(self.dir / "state.json", st)
            return st

    def append_log(self, stream: str, text: str) -> None:
        entry = {"log": text + "\n", "stream": stream, "time": rfc3339nano()}
        # Local copy: the json-file log, or dual logging's cache for a driver that cannot be
        # read back (what `docker logs` reads either way).
        with open(self.log_path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
        log_config = self.config.get("LogConfig") or {}
        if log_config.get("Type") == "gcplogs":
            ship_gcplogs(self, text, entry["time"])

    def send_control(self, control: JSONDict) -> None:
        write_json_atomic(self.dir / "control.json", control)

    def take_control(self) -> JSONDict | None:
        path = self.dir / "control.json"
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return data if isinstance(data, dict) else None

    def kill_process(self, timeout: float = 3.0) -> None:
        """SIGKILL the supervisor's process group (the whole "container") and wait for it."""
        pid = int(self.raw_state().get("Pid", 0))
        if pid <= 0 or not pid_alive(pid, self.id):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid, self.id):
            time.sleep(POLL)

    # -- derived views --------------------------------------------------------------------
    def command_argv(self) -> list[str]:
        cfg = self.config
        return list(cfg.get("Entrypoint") or []) + list(cfg.get("Cmd") or [])

    def inspect(self) -> JSONDict:
        """The ``docker inspect`` object, shaped like dockerd 28's ContainerJSON."""
        cfg = self.config
        st = self.state()
        argv = self.command_argv()
        hostname = socket.gethostname() if cfg.get("NetworkMode") == "host" else self.id[:12]
        return {
            "Id": self.id,
            "Created": cfg.get("Created"),
            "Path": argv[0] if argv else "",
            "Args": argv[1:],
            "State": {
                "Status": st.get("Status", "created"),
                "Running": bool(st.get("Running")),
                "Paused": False,
                "Restarting": bool(st.get("Restarting")),
                "OOMKilled": False,
                "Dead": False,
                "Pid": int(st.get("Pid", 0)) if st.get("Running") else 0,
                "ExitCode": int(st.get("ExitCode", 0)),
                "Error": st.get("Error", ""),
                "StartedAt": st.get("StartedAt", GO_ZERO_TIME),
                "FinishedAt": st.get("FinishedAt", GO_ZERO_TIME),
            },
            "Image": image_id(str(cfg.get("Image", ""))),
            "ResolvConfPath": f"/var/lib/docker/containers/{self.id}/resolv.conf",
            "HostnamePath": f"/var/lib/docker/containers/{self.id}/hostname",
            "HostsPath": f"/var/lib/docker/containers/{self.id}/hosts",
            "LogPath": f"/var/lib/docker/containers/{self.id}/{self.id}-json.log",
            "Name": "/" + self.name,
            "RestartCount": int(st.get("RestartCount", 0)),
            "Driver": "overlay2",
            "Platform": "linux",
            "MountLabel": "",
            "ProcessLabel": "",
            "AppArmorProfile": "" if cfg.get("Privileged") else "docker-default",
            "ExecIDs": None,
            "HostConfig": {
                "Binds": cfg.get("Binds") or None,
                "ContainerIDFile": "",
                "LogConfig": cfg.get("LogConfig") or {"Type": "json-file", "Config": {}},
                "NetworkMode": cfg.get("NetworkMode", "bridge"),
                "PortBindings": cfg.get("PortBindings", {}),
                "RestartPolicy": cfg.get("RestartPolicy", {"Name": "no", "MaximumRetryCount": 0}),
                "AutoRemove": bool(cfg.get("AutoRemove")),
                "VolumeDriver": "",
                "VolumesFrom": None,
                "CapAdd": None,
                "CapDrop": None,
                "CgroupnsMode": "private",
                "Dns": [],
                "DnsOptions": [],
                "DnsSearch": [],
                "ExtraHosts": None,
                "GroupAdd": None,
                "IpcMode": "private",
                "Links": None,
                "OomScoreAdj": 0,
                "PidMode": "",
                "Privileged": bool(cfg.get("Privileged")),
                "PublishAllPorts": False,
                "ReadonlyRootfs": False,
                "SecurityOpt": ["label=disable"] if cfg.get("Privileged") else None,
                "UTSMode": "",
                "UsernsMode": "",
                "ShmSize": int(cfg.get("ShmSize", 67108864)),
                "Runtime": "runc",
                "Isolation": "",
                "Devices": [],
                "Tmpfs": cfg.get("Tmpfs") or None,
            },
            "Mounts": cfg.get("Mounts", []),
            "Config": {
                "Hostname": hostname,
                "Domainname": "",
                "User": cfg.get("User", ""),
                "AttachStdin": False,
                "AttachStdout": not cfg.get("Detach"),
                "AttachStderr": not cfg.get("Detach"),
                "Tty": bool(cfg.get("Tty")),
                "OpenStdin": bool(cfg.get("Interactive")),
                "StdinOnce": False,
                "Env": cfg.get("Env", []),
                "Cmd": cfg.get("Cmd") or None,
                "Image": cfg.get("Image"),
                "Volumes": None,
                "WorkingDir": cfg.get("WorkingDir") or "/workspace",
                "Entrypoint": cfg.get("Entrypoint") or None,
                "OnBuild": None,
                "Labels": cfg.get("Labels", {}),
            },
            "NetworkSettings": {
                "Bridge": "",
                "SandboxID": hashlib.sha256(self.id.encode()).hexdigest(),
                "Ports": {},
                "Networks": {
                    cfg.get("NetworkMode", "bridge"): {
                        "NetworkID": hashlib.sha256(
                            str(cfg.get("NetworkMode", "bridge")).encode()
                        ).hexdigest(),
                        "IPAddress": "" if cfg.get("NetworkMode") == "host" else "172.17.0.2",
                    }
                },
            },
        }

    def status_text(self, now: float) -> str:
        st = self.state()
        status = st.get("Status", "created")
        if status == "running":
            started = parse_timestamp(str(st.get("StartedAt", ""))) or now
            return "Up " + human_duration(now - started)
        if status in ("exited", "restarting"):
            finished = parse_timestamp(str(st.get("FinishedAt", ""))) or now
            word = "Exited" if status == "exited" else "Restarting"
            return f"{word} ({int(st.get('ExitCode', 0))}) {human_duration(now - finished)} ago"
        return str(status).capitalize()


def image_inspect(ref: str) -> JSONDict:
    name = normalize_image(ref)
    # Pulled by digest (`NAME@sha256:...`, what a pinned stack runs), an image has that digest
    # and no tag (moby: `docker pull` by digest tags nothing); by tag, the registry's digest.
    repo = name.rsplit(":", 1)[0] if "@" not in name else name.split("@", 1)[0]
    digest = "sha256:" + hashlib.sha256(("digest:" + name).encode()).hexdigest()
    pinned = "@" in name
    return {
        "Id": image_id(ref),
        "RepoTags": [] if pinned else [name],
        "RepoDigests": [name] if pinned else [f"{repo}@{digest}"],
        "Parent": "",
        "Comment": "buildkit.dockerfile.v0",
        "Created": "2026-08-01T06:12:44.517112345Z",
        "DockerVersion": "",
        "Author": "",
        "Config": {
            "Env": list(IMAGE_ENV),
            "Cmd": list(IMAGE_CMD),
            "WorkingDir": "/workspace",
            "Entrypoint": None,
            "OnBuild": None,
            "Labels": None,
        },
        "Architecture": "amd64",
        "Os": "linux",
        "Size": 11_684_432_113,
        "RootFS": {"Type": "layers", "Layers": []},
        "Metadata": {"LastTagTime": GO_ZERO_TIME},
    }


# --------------------------------------------------------------------------------------------
# the docker CLI


class Out:
    """Buffered stdout/stderr so an error path can still print what came first."""

    @staticmethod
    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    @staticmethod
    def err(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()


_API_CALL = {
    "run": ("Head", "/_ping"),
    "ps": ("Get", "/v1.50/containers/json"),
    "pull": ("Post", "/v1.50/images/create"),
    "images": ("Get", "/v1.50/images/json"),
}


def require_daemon_access(daemon: Daemon, cmd: str, ref: str = "") -> None:
    """The docker socket is root-only: without sudo (and not in the docker group) it fails."""
    knobs = daemon.knobs()
    if not knobs.get("require_sudo", True):
        return
    if os.getuid() == 0 or os.environ.get("SUDO_UID"):
        return
    method, path = _API_CALL.get(cmd, ("Get", f"/v1.50/containers/{ref}/json"))
    if cmd == "rm":
        method, path = "Delete", f"/v1.50/containers/{ref}?force=1"
    url = "http://%2Fvar%2Frun%2Fdocker.sock" + path
    message = (
        f"permission denied while trying to connect to the Docker daemon socket at "
        f'unix://{SOCKET}: {method} "{url}": dial unix {SOCKET}: connect: permission denied'
    )
    if cmd == "run":
        raise CliError(f"docker: {message}\n\nRun 'docker run --help' for more information", 126)
    raise CliError(message, 1)


RUN_USAGE = "[OPTIONS] IMAGE [COMMAND] [ARG...]"
RUN_FLAGS: list[tuple[str, str, bool]] = [
    # booleans
    ("detach", "d", False), ("init", "", False), ("interactive", "i", False),
    ("no-healthcheck", "", False), ("oom-kill-disable", "", False), ("privileged", "", False),
    ("publish-all", "P", False), ("quiet", "q", False), ("read-only", "", False),
    ("rm", "", False), ("sig-proxy", "", False), ("tty", "t", False),
    ("disable-content-trust", "", False), ("use-api-socket", "", False),
    # values
    ("add-host", "", True), ("annotation", "", True), ("attach", "a", True),
    ("blkio-weight", "", True), ("blkio-weight-device", "", True), ("cap-add", "", True),
    ("cap-drop", "", True), ("cgroup-parent", "", True), ("cgroupns", "", True),
    ("cidfile", "", True), ("cpu-period", "", True), ("cpu-quota", "", True),
    ("cpu-rt-period", "", True), ("cpu-rt-runtime", "", True), ("cpu-shares", "c", True),
    ("cpus", "", True), ("cpuset-cpus", "", True), ("cpuset-mems", "", True),
    ("detach-keys", "", True), ("device", "", True), ("device-cgroup-rule", "", True),
    ("device-read-bps", "", True), ("device-read-iops", "", True),
    ("device-write-bps", "", True), ("device-write-iops", "", True), ("dns", "", True),
    ("dns-option", "", True), ("dns-search", "", True), ("domainname", "", True),
    ("entrypoint", "", True), ("env", "e", True), ("env-file", "", True),
    ("expose", "", True), ("gpus", "", True), ("group-add", "", True),
    ("health-cmd", "", True), ("health-interval", "", True), ("health-retries", "", True),
    ("health-start-interval", "", True), ("health-start-period", "", True),
    ("health-timeout", "", True), ("hostname", "h", True), ("ip", "", True),
    ("ip6", "", True), ("ipc", "", True), ("isolation", "", True),
    ("kernel-memory", "", True), ("label", "l", True), ("label-file", "", True),
    ("link", "", True), ("link-local-ip", "", True), ("log-driver", "", True),
    ("log-opt", "", True), ("mac-address", "", True), ("memory", "m", True),
    ("memory-reservation", "", True), ("memory-swap", "", True),
    ("memory-swappiness", "", True), ("mount", "", True), ("name", "", True),
    ("network", "", True), ("network-alias", "", True), ("oom-score-adj", "", True),
    ("pid", "", True), ("pids-limit", "", True), ("platform", "", True),
    ("publish", "p", True), ("pull", "", True), ("restart", "", True),
    ("runtime", "", True), ("security-opt", "", True), ("shm-size", "", True),
    ("stop-signal", "", True), ("stop-timeout", "", True), ("storage-opt", "", True),
    ("sysctl", "", True), ("tmpfs", "", True), ("ulimit", "", True), ("user", "u", True),
    ("userns", "", True), ("uts", "", True), ("volume", "v", True),
    ("volume-driver", "", True), ("volumes-from", "", True), ("workdir", "w", True),
]  # fmt: skip
RUN_ALIASES = {"net": "network", "net-alias": "network-alias"}

_NAMES_LEFT = ["admiring", "brave", "clever", "eager", "focused", "jolly", "keen", "quirky"]
_NAMES_RIGHT = ["babbage", "curie", "hopper", "lovelace", "noether", "shannon", "turing"]
_VOLUME_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def daemon_error(cmd: str, message: str, code: int = 125) -> CliError:
    return CliError(
        f"docker: Error response from daemon: {message}\n\nRun 'docker {cmd} --help' for more "
        "information",
        code,
    )


def resolve_env(entries: Sequence[str]) -> list[str]:
    """``-e KEY`` takes KEY's value from the CLI's own environment, or is dropped if unset."""
    result: list[str] = []
    for entry in entries:
        if "=" in entry:
            if entry.startswith("="):
                raise CliError(f"docker: invalid environment variable: {entry}", 125)
            result.append(entry)
        elif entry in os.environ:
            result.append(f"{entry}={os.environ[entry]}")
    return result


def read_env_file(path: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(
            f"docker: open {path}: {exc.strerror.lower() if exc.strerror else exc}", 125
        ) from exc
    entries = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            entries.append(line)
    return entries


def merge_env(user_env: Sequence[str], image_env: Sequence[str]) -> list[str]:
    """dockerd's merge: the user's variables first, then image variables not overridden."""
    result = list(user_env)
    keys = {e.split("=", 1)[0] for e in user_env}
    for entry in image_env:
        if entry.split("=", 1)[0] not in keys:
            result.append(entry)
    return result


def parse_volume(spec: str) -> JSONDict:
    """Validate a ``-v`` spec the way dockerd does and return its Mounts entry."""
    parts = spec.split(":")
    if len(parts) == 1:
        dest, source, mode = parts[0], "", ""
    elif len(parts) == 2:
        source, dest, mode = parts[0], parts[1], ""
    elif len(parts) == 3:
        source, dest, mode = parts
    else:
        raise daemon_error("run", f"invalid volume specification: '{spec}'")
    if not dest.startswith("/"):
        raise daemon_error(
            "run",
            f"invalid volume specification: '{spec}': invalid mount config for type "
            f'"{"bind" if source.startswith("/") else "volume"}": invalid mount path: '
            f"'{dest}' mount path must be absolute",
        )
    modes = [m for m in mode.split(",") if m]
    for m in modes:
        if m not in ("ro", "rw", "z", "Z", "shared", "rshared", "slave", "rslave", "private",
                     "rprivate", "nocopy"):  # fmt: skip
            raise daemon_error("run", f"invalid mode: {mode}")
    read_only = "ro" in modes
    if source.startswith("/"):
        return {
            "Type": "bind",
            "Source": source,
            "Destination": dest,
            "Mode": mode,
            "RW": not read_only,
            "Propagation": "rprivate",
        }
    if source and not _VOLUME_NAME_RE.match(source):
        raise daemon_error(
            "run",
            f'create {source}: "{source}" includes invalid characters for a local volume name, '
            'only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host '
            "directory, use absolute path",
        )
    name = source or secrets.token_hex(32)
    return {
        "Type": "volume",
        "Name": name,
        "Source": f"/var/lib/docker/volumes/{name}/_data",
        "Destination": dest,
        "Driver": "local",
        "Mode": mode or "z",
        "RW": not read_only,
        "Propagation": "",
    }


def parse_mount(spec: str) -> JSONDict:
    fields: dict[str, str] = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        fields[key.strip()] = value
    mtype = fields.get("type", "volume")
    source = fields.get("source", fields.get("src", ""))
    target = fields.get("target", fields.get("destination", fields.get("dst", "")))
    read_only = "readonly" in fields or "ro" in fields
    if not target:
        raise CliError(
            'invalid argument "' + spec + '" for "--mount" flag: target is required', 125
        )
    if mtype == "bind" and not os.path.exists(source):
        raise daemon_error(
            "run",
            f'invalid mount config for type "bind": bind source path does not exist: {source}',
        )
    return {
        "Type": mtype,
        "Source": source,
        "Destination": target,
        "Mode": "",
        "RW": not read_only,
        "Propagation": "rprivate" if mtype == "bind" else "",
    }


def parse_restart(text: str) -> JSONDict:
    name, _, count = text.partition(":")
    if name not in ("no", "always", "unless-stopped", "on-failure") or (
        count and (name != "on-failure" or not count.isdigit())
    ):
        raise daemon_error("run", f"invalid restart policy '{text}'")
    return {"Name": name, "MaximumRetryCount": int(count or 0)}


def parse_publish(text: str) -> tuple[str, int, int]:
    """``[ip:][hostPort:]containerPort[/proto]`` -> (ip, host_port, container_port)."""
    body, _, _proto = text.partition("/")
    parts = body.split(":")
    try:
        if len(parts) == 1:
            return "", 0, int(parts[0])
        if len(parts) == 2:
            return "", int(parts[0] or 0), int(parts[1])
        return parts[0], int(parts[1] or 0), int(parts[2])
    except ValueError as exc:
        raise CliError(f"docker: invalid containerPort: {text}", 125) from exc


# Log drivers, as dockerd treats them (moby daemon/logger): `--log-driver` names a registered
# driver, `--log-opt KEY=VALUE` options are checked by that driver at create time
# (logger.ValidateLogOpts: the built-in `mode`/`max-buffer-size` and dual logging's `cache-*`
# options, then the driver's own validator), and the driver is started with the container.
# gcplogs (daemon/logger/gcplogs/gcplogging.go) accepts only the options below and pings Cloud
# Logging when it starts: a refusal fails the start with "failed to initialize logging driver:
# unable to connect or authenticate with Google Cloud Logging: ...". A driver that cannot be read
# back is wrapped in the local cache unless `cache-disabled` is true (Docker >= 20.10, "Dual
# logging"), so `docker logs` works; with `none` or the cache disabled it answers
# "configured logging driver does not support reading".
LOG_DRIVERS = ("json-file", "local", "none", "gcplogs", "journald", "syslog", "fluentd",
               "gelf", "awslogs", "splunk", "etwlogs")  # fmt: skip
GCPLOGS_OPTS = ("gcp-project", "labels", "labels-regex", "env", "env-regex", "gcp-log-cmd",
                "gcp-meta-zone", "gcp-meta-name", "gcp-meta-id")  # fmt: skip
BUILTIN_LOG_OPTS = ("mode", "max-buffer-size", "cache-disabled", "cache-max-size",
                    "cache-max-file", "cache-compress")  # fmt: skip
READABLE_DRIVERS = ("json-file", "local", "journald")


def parse_log_config(flags: Sequence[tuple[str, Any]]) -> JSONDict:
    driver = str(flag_last(flags, "log-driver", "json-file"))
    opts: dict[str, str] = {}
    for raw in flag_all(flags, "log-opt"):
        key, eq, value = str(raw).partition("=")
        if not eq:
            raise CliError(
                f'invalid argument "{raw}" for "--log-opt" flag: invalid key value pair '
                "format in logging opts",
                125,
            )
        opts[key] = value
    if driver not in LOG_DRIVERS:
        raise daemon_error("run", f"logger: no log driver named '{driver}' is registered")
    if driver == "gcplogs":
        for key in opts:
            if key not in GCPLOGS_OPTS and key not in BUILTIN_LOG_OPTS:
                raise daemon_error("run", f'"{key}" is not a valid option for the gcplogs driver')
    cache = opts.get("cache-disabled", "")
    if cache and cache.lower() not in ("true", "false", "1", "0", "t", "f"):
        raise daemon_error("run", f"invalid value for option cache-disabled: {cache}")
    return {"Type": driver, "Config": opts}


def log_config_readable(log_config: JSONDict) -> bool:
    driver = log_config.get("Type", "json-file")
    if driver in READABLE_DRIVERS:
        return True
    if driver == "none":
        return False
    cache = str((log_config.get("Config") or {}).get("cache-disabled", "")).lower()
    return cache not in ("true", "1", "t")


def log_driver_start_error(daemon: Daemon, log_config: JSONDict) -> str:
    """Why the driver cannot start (the daemon's `gcplogs_error` knob: Cloud Logging refusing
    the node's credentials, for the first `gcplogs_failures` starts, default every one)."""
    if log_config.get("Type") != "gcplogs":
        return ""
    knobs = daemon.knobs()
    error = knobs.get("gcplogs_error")
    if not error:
        return ""
    with daemon.lock():
        counter = daemon.root / "gcplogs_failed"
        failed = int(counter.read_text()) if counter.exists() else 0
        limit = knobs.get("gcplogs_failures")
        if limit is not None and failed >= int(limit):
            return ""
        counter.write_text(str(failed + 1))
    return (
        "failed to initialize logging driver: unable to connect or authenticate with Google "
        f"Cloud Logging: {error}"
    )


def ship_gcplogs(container: Container, text: str, when: str) -> None:
    """What gcplogs writes to Cloud Logging for one line: log `gcplogs-docker-driver`, resource
    `gce_instance`, payload {instance, container {name, id, imageName, metadata}, message}, the
    metadata holding the container labels its `labels` option names. The fake's Cloud Logging
    is `<state>/cloud_logging.jsonl`."""
    cfg = container.config
    opts = (cfg.get("LogConfig") or {}).get("Config") or {}
    wanted = [k for k in str(opts.get("labels", "")).split(",") if k]
    labels = cfg.get("Labels") or {}
    entry = {
        "logName": "gcplogs-docker-driver",
        "resource": {"type": "gce_instance"},
        "timestamp": when,
        "jsonPayload": {
            "container": {
                "name": "/" + container.name,
                "id": container.id,
                "imageName": cfg.get("Image", ""),
                "metadata": {k: labels[k] for k in wanted if k in labels},
            },
            "message": text,
        },
    }
    with open(container.daemon.root / "cloud_logging.jsonl", "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def cmd_run(daemon: Daemon, args: list[str]) -> int:
    flags, positionals = parse_flags(
        "run", RUN_USAGE, args, RUN_FLAGS, interspersed=False, aliases=RUN_ALIASES
    )
    if not positionals:
        raise arg_count_error("run", RUN_USAGE, True)
    require_daemon_access(daemon, "run")
    image, cmd = positionals[0], positionals[1:]
    name = (
        flag_last(flags, "name") or f"{secrets.choice(_NAMES_LEFT)}_{secrets.choice(_NAMES_RIGHT)}"
    )
    if not re.fullmatch(r"/?[a-zA-Z0-9][a-zA-Z0-9_.-]+", name):
        raise daemon_error(
            "run", f"Invalid container name ({name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"
        )
    name = name.lstrip("/")

    shm_size = 67108864
    if flag_last(flags, "shm-size") is not None:
        raw = str(flag_last(flags, "shm-size"))
        try:
            shm_size = ram_in_bytes(raw)
        except ValueError as exc:
            raise usage_error(
                "run", RUN_USAGE, f'invalid argument "{raw}" for "--shm-size" flag: {exc}'
            ) from exc
    restart = parse_restart(str(flag_last(flags, "restart", "no")))
    auto_remove = bool(flag_last(flags, "rm", False))
    if auto_remove and restart["Name"] != "no":
        raise daemon_error("run", "conflicting options: cannot specify both --restart and --rm")

    env_entries: list[str] = []
    for env_file in flag_all(flags, "env-file"):
        env_entries += read_env_file(str(env_file))
    env_entries += [str(e) for e in flag_all(flags, "env")]
    user_env = resolve_env(env_entries)

    binds = [str(v) for v in flag_all(flags, "volume")]
    mounts = [parse_volume(b) for b in binds]
    mounts += [parse_mount(str(m)) for m in flag_all(flags, "mount")]
    bind_specs = [
        b for b, m in zip(binds, mounts[: len(binds)], strict=True) if m["Type"] == "bind"
    ]

    log_config = parse_log_config(flags)
    network = str(flag_last(flags, "network", "bridge"))
    if network == "default":
        network = "bridge"
    messages: list[str] = []
    port_bindings: JSONDict = {}
    publish = [parse_publish(str(p)) for p in flag_all(flags, "publish")]
    if publish and network == "host":
        messages.append("WARNING: Published ports are discarded when using host network mode")
        publish = []
    for ip, host_port, ctr_port in publish:
        port_bindings[f"{ctr_port}/tcp"] = [{"HostIp": ip, "HostPort": str(host_port or "")}]

    entrypoint_flag = flag_last(flags, "entrypoint")
    entrypoint: list[str] | None = None
    if entrypoint_flag is not None:
        entrypoint = [str(entrypoint_flag)] if entrypoint_flag else None
    if not cmd and entrypoint is None:
        cmd = list(IMAGE_CMD)

    with daemon.lock():
        for other in daemon.all_containers():
            if other.name == name:
                raise daemon_error(
                    "run",
                    f'Conflict. The container name "/{name}" is already in use by container '
                    f'"{other.id}". You have to remove (or rename) that container to be able to '
                    "reuse that name.",
                )
        cid = secrets.token_hex(32)
        cdir = daemon.containers_dir / cid
        cdir.mkdir(parents=True)
        created = now_ns()
        # Reserve the name before releasing the lock.
        write_json_atomic(cdir / "config.json", {"Name": "/" + name, "CreatedNs": created})

    try:
        pull_messages = ensure_image(daemon, image, "run")
    except CliError:
        shutil.rmtree(cdir, ignore_errors=True)
        raise
    for line in messages + pull_messages:
        Out.err(line + "\n")

    # Like dockerd, create missing bind sources as directories (a missing *file* becomes a dir).
    for mount in mounts:
        if mount["Type"] == "bind":
            with contextlib.suppress(OSError):
                Path(mount["Source"]).mkdir(parents=True, exist_ok=True)

    scenario = daemon.next_scenario([*(entrypoint or []), *cmd])
    for key in ("log", "restart_log"):
        if key in scenario or key == "log":
            fixture = resolve_fixture(str(scenario.get(key, "v5e1_ready.log")))
            try:
                load_fixture(fixture)
            except (OSError, ValueError) as exc:
                shutil.rmtree(cdir, ignore_errors=True)
                raise CliError(
                    f"fake docker: unusable scenario {key} {fixture}: {exc}", 125
                ) from exc
    config: JSONDict = {
        "Id": cid,
        "Name": "/" + name,
        "Created": rfc3339nano(created),
        "CreatedNs": created,
        "Image": image,
        "Entrypoint": entrypoint,
        "Cmd": cmd or None,
        "Env": merge_env(user_env, IMAGE_ENV),
        "Binds": bind_specs or None,
        "Mounts": mounts,
        "Privileged": bool(flag_last(flags, "privileged", False)),
        "NetworkMode": network,
        "ShmSize": shm_size,
        "RestartPolicy": restart,
        "AutoRemove": auto_remove,
        "PortBindings": port_bindings,
        "Publish": publish,
        "Labels": dict(str(lbl).partition("=")[::2] for lbl in flag_all(flags, "label")),
        "User": str(flag_last(flags, "user", "")),
        "WorkingDir": str(flag_last(flags, "workdir", "")),
        "Tty": bool(flag_last(flags, "tty", False)),
        "Interactive": bool(flag_last(flags, "interactive", False)),
        "Detach": bool(flag_last(flags, "detach", False)),
        "Tmpfs": [str(t) for t in flag_all(flags, "tmpfs")] or None,
        "Scenario": scenario,
        "ClientArgv": ["docker", "run", *args],
        "LogConfig": log_config,
    }
    write_json_atomic(cdir / "config.json", config)
    container = Container(daemon, cid)
    container.update_state(
        Status="created",
        Running=False,
        Restarting=False,
        Pid=0,
        ExitCode=0,
        Error="",
        StartedAt=GO_ZERO_TIME,
        FinishedAt=GO_ZERO_TIME,
        RestartCount=0,
        Boot=0,
        Ready=False,
        StoppedByUser=False,
    )
    failure = log_driver_start_error(daemon, log_config)
    if failure:
        # dockerd creates the container, then fails its start in StartLogger: the container
        # stays "created" and `docker run` exits 125 (docker/cli runStartContainerErr).
        raise daemon_error("run", f"failed to create task for container: {failure}")
    start_container(container)
    if config["Detach"]:
        Out.out(cid + "\n")
        return 0
    return follow_until_exit(container)


def ensure_image(daemon: Daemon, image: str, cmd: str) -> list[str]:
    """``docker run`` pulls a missing image first; returns the progress lines it printed."""
    if daemon.has_image(image):
        return []
    name = normalize_image(image)
    error = daemon.knobs().get("pull_errors", {}).get(name)
    lines = [f"Unable to find image '{name}' locally"]
    if error:
        for line in lines:
            Out.err(line + "\n")
        raise daemon_error(cmd, str(error))
    lines += pull_lines(name, fresh=True)[:-1]
    daemon.add_image(image)
    return lines


def pull_lines(name: str, fresh: bool) -> list[str]:
    repo, _, tag = name.rpartition(":")
    digest = "sha256:" + hashlib.sha256(("digest:" + name).encode()).hexdigest()
    lines = [f"{tag}: Pulling from {repo}"]
    if fresh:
        for i in range(4):
            lines.append(
                hashlib.sha256(f"{name}:{i}".encode()).hexdigest()[:12] + ": Pull complete"
            )
    lines.append(f"Digest: {digest}")
    if fresh:
        lines.append(f"Status: Downloaded newer image for {name}")
    else:
        lines.append(f"Status: Image is up to date for {name}")
    lines.append(("docker.io/" if "/" in repo and "." not in repo.split("/")[0] else "") + name)
    return lines


def start_container(container: Container) -> None:
    """Spawn the detached supervisor ("the container") and mark the container running.

    ``start_new_session`` puts it in its own session and process group with no terminal and
    all stdio on /dev/null, so closing the SSH session that ran ``docker run`` cannot touch it
    (that is the property being tested). Its argv ends with the container's command line and
    its environment is ``Config.Env``, so ``ps``/``/proc/<pid>/environ`` on the "VM" show what
    they would show for a real container.
    """
    cfg = container.config
    st = container.raw_state()
    boot = int(st.get("Boot", 0)) + 1
    env = dict(e.split("=", 1) for e in cfg.get("Env", []) if "=" in e)
    env["HOSTNAME"] = container.id[:12]
    env["FAKE_VLLM_LOGS_DIR"] = str(fixtures_dir())
    with open(container.dir / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "__supervise__",
                str(container.daemon.root),
                container.id,
                "--",
                *container.command_argv(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            env=env,
            cwd="/",
        )
    container.update_state(
        Status="running",
        Running=True,
        Restarting=False,
        Pid=proc.pid,
        ExitCode=0,
        Error="",
        StartedAt=rfc3339nano(),
        FinishedAt=st.get("FinishedAt", GO_ZERO_TIME),
        Boot=boot,
        Ready=False,
        StoppedByUser=False,
    )


def iter_log(container: Container, offset: int) -> tuple[list[JSONDict], int]:
    """Complete JSON lines appended since ``offset`` and the new offset."""
    try:
        with open(container.log_path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    entries = []
    for raw in data[: end + 1].splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            entries.append(json.loads(raw))
    return entries, offset + end + 1


def emit_entries(entries: Sequence[JSONDict], timestamps: bool, details: bool) -> None:
    for entry in entries:
        text = str(entry.get("log", ""))
        if timestamps:
            text = f"{entry.get('time', '')} {text}"
        if entry.get("stream") == "stderr":
            sys.stderr.write(text)
        else:
            sys.stdout.write(text)
    sys.stdout.flush()
    sys.stderr.flush()


def follow(
    container: Container,
    offset: int,
    since: float | None,
    until: float | None,
    *,
    timestamps: bool,
    details: bool,
) -> None:
    """Stream new log lines until the run that was live at the start stops (like json-file)."""
    boot = int(container.raw_state().get("Boot", 0))
    while True:
        entries, offset = iter_log(container, offset)
        emit_entries(filter_time(entries, since, until), timestamps, details)
        if not container.exists():
            return
        st = container.state()
        if not st.get("Running") or int(st.get("Boot", 0)) != boot or st.get("Restarting"):
            entries, offset = iter_log(container, offset)
            emit_entries(filter_time(entries, since, until), timestamps, details)
            return
        time.sleep(0.05)


def filter_time(
    entries: Sequence[JSONDict], since: float | None, until: float | None
) -> list[JSONDict]:
    if since is None and until is None:
        return list(entries)
    kept = []
    for entry in entries:
        at = parse_timestamp(str(entry.get("time", ""))) or 0.0
        if since is not None and at < since:
            continue
        if until is not None and at > until:
            continue
        kept.append(entry)
    return kept


def follow_until_exit(container: Container) -> int:
    follow(container, 0, None, None, timestamps=False, details=False)
    st = container.state()
    return int(st.get("ExitCode", 0))


LOGS_USAGE = "[OPTIONS] CONTAINER"
LOGS_FLAGS: list[tuple[str, str, bool]] = [
    ("details", "", False), ("follow", "f", False), ("since", "", True),
    ("tail", "n", True), ("timestamps", "t", False), ("until", "", True),
]  # fmt: skip


def cmd_logs(daemon: Daemon, args: list[str]) -> int:
    flags, positionals = parse_flags("logs", LOGS_USAGE, args, LOGS_FLAGS, interspersed=True)
    if len(positionals) != 1:
        raise arg_count_error("logs", LOGS_USAGE, False)
    ref = positionals[0]
    require_daemon_access(daemon, "logs", ref)
    container = daemon.find(ref)
    if container is None:
        raise CliError(f"Error response from daemon: No such container: {ref}", 1)
    if not log_config_readable(container.config.get("LogConfig") or {}):
        # moby daemon/logger ErrReadLogsNotSupported
        raise CliError(
            "Error response from daemon: configured logging driver does not support reading", 1
        )
    now = time.time()
    since = until = None
    if flag_last(flags, "since"):
        since = parse_since(str(flag_last(flags, "since")), now)
        if since is None:
            raise CliError(
                f'Error response from daemon: invalid value for "since": failed to parse value as '
                f'time or duration: "{flag_last(flags, "since")}"',
                1,
            )
    if flag_last(flags, "until"):
        until = parse_since(str(flag_last(flags, "until")), now)
    tail_raw = str(flag_last(flags, "tail", "all"))
    timestamps = bool(flag_last(flags, "timestamps", False))
    details = bool(flag_last(flags, "details", False))
    entries, offset = iter_log(container, 0)
    entries = filter_time(entries, since, until)
    if tail_raw != "all":
        try:
            tail = int(tail_raw)
        except ValueError:
            tail = -1
        if tail >= 0:
            entries = entries[len(entries) - tail :] if tail else []
    try:
        emit_entries(entries, timestamps, details)
        if flag_last(flags, "follow", False):
            follow(container, offset, since, until, timestamps=timestamps, details=details)
    except BrokenPipeError:
        # The reader went away (e.g. `| grep -m1` after the next line): exit quietly, and keep
        # the interpreter from complaining while it flushes the dead pipe at shutdown.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())
        return 0
    return 0


INSPECT_FLAGS: list[tuple[str, str, bool]] = [
    ("format", "f", True),
    ("size", "s", False),
    ("type", "", True),
]


def cmd_inspect(daemon: Daemon, args: list[str], kind: str) -> int:
    """``docker inspect`` (kind "any"), ``docker container inspect``, ``docker image inspect``."""
    cmd = {"any": "inspect", "container": "container inspect", "image": "image inspect"}[kind]
    usage = {
        "any": "[OPTIONS] NAME|ID [NAME|ID...]",
        "container": "[OPTIONS] CONTAINER [CONTAINER...]",
        "image": "[OPTIONS] IMAGE [IMAGE...]",
    }[kind]
    specs = INSPECT_FLAGS if kind == "any" else INSPECT_FLAGS[:2]
    flags, positionals = parse_flags(cmd, usage, args, specs, interspersed=True)
    if not positionals:
        raise arg_count_error(cmd, usage, True)
    require_daemon_access(daemon, "inspect", positionals[0])
    type_filter = str(flag_last(flags, "type", "")) or None
    fmt = flag_last(flags, "format")
    template: GoTemplate | None = None
    if fmt:
        try:
            template = GoTemplate(str(fmt))
        except TemplateError as exc:
            raise CliError(f"template parsing error: {exc}", 64) from exc
    found: list[JSONDict] = []
    errors: list[str] = []
    for ref in positionals:
        obj: JSONDict | None = None
        if kind in ("any", "container") and type_filter in (None, "container"):
            container = daemon.find(ref)
            if container is not None:
                obj = container.inspect()
        if (
            obj is None
            and kind in ("any", "image")
            and type_filter in (None, "image")
            and daemon.has_image(ref)
        ):
            obj = image_inspect(ref)
        if obj is None:
            if kind == "any":
                errors.append(f"Error: No such object: {ref}")
            elif kind == "container":
                errors.append(f"Error response from daemon: No such container: {ref}")
            else:
                name = normalize_image(ref) if ":" not in ref.rsplit("/", 1)[-1] else ref
                errors.append(f"Error response from daemon: No such image: {name}")
            continue
        found.append(obj)
    if template is None:
        Out.out(go_json_indent(found) + "\n" if found else "[]\n")
    elif not found:
        Out.out("\n")
    else:
        for obj in found:
            try:
                Out.out(template.execute(obj) + "\n")
            except TemplateError as exc:
                Out.out("\n")
                raise CliError(f"template parsing error: {exc}", 64 if exc.parse else 1) from exc
    if errors:
        raise CliError("\n".join(errors), 1)
    return 0


PS_USAGE = "[OPTIONS]"
PS_FILTER_KEYS = (
    "name", "id", "status", "ancestor", "label", "exited", "network", "before", "since",
    "volume", "health", "publish", "expose", "is-task",
)  # fmt: skip
PS_FLAGS: list[tuple[str, str, bool]] = [
    ("all", "a", False), ("filter", "f", True), ("format", "", True), ("last", "n", True),
    ("latest", "l", False), ("no-trunc", "", False), ("quiet", "q", False), ("size", "s", False),
]  # fmt: skip


def ps_row(container: Container, no_trunc: bool, now: float) -> JSONDict:
    cfg = container.config
    command = " ".join(container.command_argv())
    if not no_trunc and len(command) > 20:
        command = command[:19] + "…"
    created_ns = int(cfg.get("CreatedNs", 0))
    return {
        "Command": go_quote(command),
        "CreatedAt": time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(created_ns / 1e9)),
        "ID": container.id if no_trunc else container.id[:12],
        "Image": cfg.get("Image", ""),
        "Labels": ",".join(f"{k}={v}" for k, v in sorted(cfg.get("Labels", {}).items())),
        "LocalVolumes": str(sum(1 for m in cfg.get("Mounts", []) if m["Type"] == "volume")),
        "Mounts": ",".join(m.get("Name", m.get("Source", "")) for m in cfg.get("Mounts", [])),
        "Names": container.name,
        "Networks": cfg.get("NetworkMode", "bridge"),
        "Ports": "",
        "RunningFor": human_duration(now - created_ns / 1e9) + " ago",
        "Size": "0B",
        "State": container.state().get("Status", "created"),
        "Status": container.status_text(now),
    }


def tabwriter(rows: Sequence[Sequence[str]], minwidth: int = 10, padding: int = 3) -> str:
    """Go's tabwriter as docker configures it: min width 10, padding 3, last column bare."""
    if not rows:
        return ""
    columns = max(len(r) for r in rows)
    widths = [0] * columns
    for row in rows:
        for idx, cell in enumerate(row[:-1]):
            widths[idx] = max(widths[idx], len(cell) + padding, minwidth)
    lines = []
    for row in rows:
        parts = [cell.ljust(widths[idx]) for idx, cell in enumerate(row[:-1])]
        parts.append(row[-1])
        lines.append("".join(parts).rstrip() if not row[-1] else "".join(parts))
    return "\n".join(lines) + "\n"


def cmd_ps(daemon: Daemon, args: list[str]) -> int:
    flags, positionals = parse_flags("ps", PS_USAGE, args, PS_FLAGS, interspersed=True)
    if positionals:
        raise CliError(
            f"docker: 'docker ps' accepts no arguments\n\nUsage:  docker ps {PS_USAGE}\n\n"
            "Run 'docker ps --help' for more information",
            1,
        )
    require_daemon_access(daemon, "ps")
    filters: dict[str, list[str]] = {}
    for raw in flag_all(flags, "filter"):
        key, eq, value = str(raw).partition("=")
        if not eq:
            raise CliError("bad format of filter (expected name=value)", 125)
        if key not in PS_FILTER_KEYS:
            raise CliError(f"Error response from daemon: invalid filter '{key}'", 1)
        filters.setdefault(key, []).append(value)
    show_all = bool(flag_last(flags, "all", False)) or "status" in filters
    containers = []
    for c in daemon.all_containers():
        st = c.state()
        status = st.get("Status", "created")
        if not show_all and status not in ("running", "restarting", "paused"):
            continue
        if "name" in filters and not any(
            re.search(p, c.name) or re.search(p, "/" + c.name) for p in filters["name"]
        ):
            continue
        if "id" in filters and not any(c.id.startswith(p) for p in filters["id"]):
            continue
        if "status" in filters and status not in filters["status"]:
            continue
        if "ancestor" in filters and not any(
            normalize_image(str(c.config.get("Image", ""))) == normalize_image(p)
            for p in filters["ancestor"]
        ):
            continue
        if "exited" in filters and not (
            status == "exited" and str(st.get("ExitCode", 0)) in filters["exited"]
        ):
            continue
        containers.append(c)
    if flag_last(flags, "latest", False):
        containers = containers[:1]
    elif flag_last(flags, "last") is not None:
        containers = containers[: int(str(flag_last(flags, "last")))]
    now = time.time()
    no_trunc = bool(flag_last(flags, "no-trunc", False))
    rows = [ps_row(c, no_trunc, now) for c in containers]
    if flag_last(flags, "quiet", False):
        Out.out("".join(r["ID"] + "\n" for r in rows))
        return 0
    fmt = flag_last(flags, "format")
    if fmt and str(fmt) != "table":
        fmt_text = str(fmt)
        table = fmt_text.startswith("table ")
        if table:
            fmt_text = fmt_text[len("table ") :]
        try:
            template = GoTemplate(fmt_text)
            lines = [template.execute(r) for r in rows]
        except TemplateError as exc:
            raise CliError(f"template parsing error: {exc}", 64 if exc.parse else 1) from exc
        if table:
            heading = template.execute(_PS_HEADERS)
            Out.out(tabwriter([heading.split("\t")] + [ln.split("\t") for ln in lines]))
        else:
            Out.out("".join(line + "\n" for line in lines))
        return 0
    header = ["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"]
    table_rows = [header] + [
        [r["ID"], r["Image"], r["Command"], r["RunningFor"], r["Status"], r["Ports"], r["Names"]]
        for r in rows
    ]
    Out.out(tabwriter(table_rows))
    return 0


_PS_HEADERS = {
    "Command": "COMMAND", "CreatedAt": "CREATED AT", "ID": "CONTAINER ID", "Image": "IMAGE",
    "Labels": "LABELS", "LocalVolumes": "LOCAL VOLUMES", "Mounts": "MOUNTS", "Names": "NAMES",
    "Networks": "NETWORKS", "Ports": "PORTS", "RunningFor": "CREATED", "Size": "SIZE",
    "State": "STATE", "Status": "STATUS",
}  # fmt: skip


RM_USAGE = "[OPTIONS] CONTAINER [CONTAINER...]"
RM_FLAGS: list[tuple[str, str, bool]] = [("force", "f", False), ("link", "l", False),
                                         ("volumes", "v", False)]  # fmt: skip


def remove_container(container: Container) -> None:
    container.kill_process()
    shutil.rmtree(container.dir, ignore_errors=True)


def cmd_rm(daemon: Daemon, args: list[str]) -> int:
    flags, positionals = parse_flags("rm", RM_USAGE, args, RM_FLAGS, interspersed=True)
    if not positionals:
        raise arg_count_error("rm", RM_USAGE, True)
    require_daemon_access(daemon, "rm", positionals[0])
    force = bool(flag_last(flags, "force", False))
    errors: list[str] = []
    for ref in positionals:
        container = daemon.find(ref)
        if container is None:
            message = f"Error response from daemon: No such container: {ref}"
            if force:
                # docker CLI >= 24: not-found is reported but is not a failure under -f.
                Out.err(message + "\n")
            else:
                errors.append(message)
            continue
        st = container.state()
        if st.get("Running") and not force:
            errors.append(
                f'Error response from daemon: cannot remove container "{container.name}": '
                "container is running: stop the container before removing or force remove"
            )
            continue
        remove_container(container)
        Out.out(ref + "\n")
    if errors:
        raise CliError("\n".join(errors), 1)
    return 0


def wait_stopped(container: Container, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not container.exists() or not container.state().get("Running"):
            return True
        time.sleep(POLL)
    return False


def mark_killed(container: Container, code: int) -> None:
    container.kill_process()
    container.update_state(
        Status="exited",
        Running=False,
        Restarting=False,
        Pid=0,
        ExitCode=code,
        FinishedAt=rfc3339nano(),
        StoppedByUser=True,
        Ready=False,
    )
    if container.config.get("AutoRemove"):
        shutil.rmtree(container.dir, ignore_errors=True)


def cmd_stop_like(daemon: Daemon, args: list[str], verb: str) -> int:
    """``docker stop|kill|restart|start|wait``, driving the supervisor through control.json."""
    usage = "[OPTIONS] CONTAINER [CONTAINER...]"
    specs: list[tuple[str, str, bool]] = {
        "stop": [("time", "t", True), ("timeout", "", True), ("signal", "s", True)],
        "restart": [("time", "t", True), ("timeout", "", True), ("signal", "s", True)],
        "kill": [("signal", "s", True)],
        "start": [("attach", "a", False), ("interactive", "i", False)],
        "wait": [],
    }[verb]
    flags, positionals = parse_flags(verb, usage, args, specs, interspersed=True)
    if not positionals:
        raise arg_count_error(verb, usage, True)
    require_daemon_access(daemon, verb, positionals[0])
    errors: list[str] = []
    for ref in positionals:
        container = daemon.find(ref)
        if container is None:
            errors.append(f"Error response from daemon: No such container: {ref}")
            continue
        st = container.state()
        running = bool(st.get("Running"))
        if verb == "wait":
            while container.exists() and container.state().get("Running"):
                time.sleep(0.05)
            code = int(container.state().get("ExitCode", 0)) if container.exists() else 0
            Out.out(f"{code}\n")
            continue
        if verb == "kill":
            if not running:
                errors.append(
                    f"Error response from daemon: cannot kill container: {ref}: container "
                    f"{container.id} is not running"
                )
                continue
            mark_killed(container, 137)
        elif verb in ("stop", "restart") and running:
            grace = float(flag_last(flags, "time", flag_last(flags, "timeout", 10)) or 10)
            container.send_control({"action": "stop"})
            if not wait_stopped(container, min(grace, 10.0) + 1.0):
                mark_killed(container, 137)
            elif container.exists():
                container.update_state(StoppedByUser=True)
        if (
            verb in ("start", "restart")
            and container.exists()
            and not container.state().get("Running")
        ):
            start_container(container)
        Out.out(ref + "\n")
    if errors:
        raise CliError("\n".join(errors), 1)
    return 0


def cmd_pull(daemon: Daemon, args: list[str]) -> int:
    usage = "[OPTIONS] NAME[:TAG|@DIGEST]"
    flags, positionals = parse_flags(
        "pull",
        usage,
        args,
        [
            ("all-tags", "a", False),
            ("quiet", "q", False),
            ("platform", "", True),
            ("disable-content-trust", "", False),
        ],
        interspersed=True,
    )
    if len(positionals) != 1:
        raise arg_count_error("pull", usage, False)
    require_daemon_access(daemon, "pull")
    name = normalize_image(positionals[0])
    error = daemon.knobs().get("pull_errors", {}).get(name)
    if error:
        raise CliError(f"Error response from daemon: {error}", 1)
    fresh = not daemon.has_image(name)
    if fresh:
        # A real pull blocks until every layer is downloaded and extracted (docker/cli
        # cli/command/image/pull.go streams the daemon's progress until the end): minutes for
        # vllm/vllm-tpu. `pull_seconds` models that wait.
        time.sleep(float(daemon.knobs().get("pull_seconds", 0)))
    daemon.add_image(name)
    lines = pull_lines(name, fresh)
    if flag_last(flags, "quiet", False):
        lines = lines[-1:]
    Out.out("".join(line + "\n" for line in lines))
    return 0


def cmd_images(daemon: Daemon, args: list[str]) -> int:
    usage = "[OPTIONS] [REPOSITORY[:TAG]]"
    flags, positionals = parse_flags(
        "images",
        usage,
        args,
        [
            ("all", "a", False),
            ("quiet", "q", False),
            ("digests", "", False),
            ("no-trunc", "", False),
            ("filter", "f", True),
            ("format", "", True),
            ("tree", "", False),
        ],
        interspersed=True,
    )
    require_daemon_access(daemon, "images")
    images = daemon.images()
    if positionals:
        want = positionals[0]
        images = [i for i in images if i == normalize_image(want) or i.rsplit(":", 1)[0] == want]
    if flag_last(flags, "quiet", False):
        Out.out("".join(image_id(i)[7:19] + "\n" for i in images))
        return 0
    rows = [["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE"]]
    for i in images:
        repo, _, tag = i.rpartition(":")
        rows.append([repo, tag, image_id(i)[7:19], "3 months ago", "11.7GB"])
    Out.out(tabwriter(rows))
    return 0


def cmd_version(args: list[str]) -> int:
    flags, _ = parse_flags("version", "[OPTIONS]", args, [("format", "f", True)], interspersed=True)
    data = {"Client": {"Version": DOCKER_VERSION, "ApiVersion": "1.50", "GitCommit": DOCKER_BUILD},
            "Server": {"Version": DOCKER_VERSION, "ApiVersion": "1.50"}}  # fmt: skip
    fmt = flag_last(flags, "format")
    if fmt:
        Out.out(render_template(str(fmt), data) + "\n")
    else:
        Out.out(
            f"Client:\n Version:           {DOCKER_VERSION}\n API version:       1.50\n"
            f" Git commit:        {DOCKER_BUILD}\n\nServer:\n Engine:\n  Version:          "
            f"{DOCKER_VERSION}\n  API version:      1.50 (minimum version 1.24)\n"
        )
    return 0


NOT_EMULATED = {"exec", "cp", "attach", "commit", "build", "login", "logout", "push", "tag",
                "save", "load", "export", "import", "network", "volume", "system", "compose",
                "update", "rename", "pause", "unpause", "top", "stats", "events", "port",
                "diff", "create", "history", "search", "buildx", "context", "info"}  # fmt: skip


def docker_main(argv: list[str]) -> int:
    daemon = Daemon.from_env()
    daemon.record("docker", ["docker", *argv])
    args = list(argv)
    # global options
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-v", "--version"):
            Out.out(f"Docker version {DOCKER_VERSION}, build {DOCKER_BUILD}\n")
            return 0
        if opt in ("-H", "--host", "--config", "--context", "-c", "-l", "--log-level"):
            if args:
                args.pop(0)
        elif opt.startswith(("--host=", "--config=", "--context=", "--log-level=")) or opt in (
            "-D",
            "--debug",
            "--tls",
            "--tlsverify",
        ):
            pass
        else:
            raise CliError(f"unknown flag: {opt}\nSee 'docker --help'.", 125)
    if not args:
        Out.out("Usage:  docker [OPTIONS] COMMAND\n")
        return 0
    command, rest = args[0], args[1:]
    if command == "container" and rest:
        command, rest = rest[0], rest[1:]
        if command == "inspect":
            return cmd_inspect(daemon, rest, "container")
        if command in ("ls", "list"):
            command = "ps"
        if command == "remove":
            command = "rm"
    elif command == "image" and rest:
        sub, rest = rest[0], rest[1:]
        if sub == "inspect":
            return cmd_inspect(daemon, rest, "image")
        if sub in ("ls", "list"):
            return cmd_images(daemon, rest)
        if sub == "pull":
            return cmd_pull(daemon, rest)
        command = "image " + sub
    handlers: dict[str, Callable[[Daemon, list[str]], int]] = {
        "run": cmd_run,
        "logs": cmd_logs,
        "ps": cmd_ps,
        "rm": cmd_rm,
        "pull": cmd_pull,
        "images": cmd_images,
        "inspect": lambda d, a: cmd_inspect(d, a, "any"),
        "stop": lambda d, a: cmd_stop_like(d, a, "stop"),
        "kill": lambda d, a: cmd_stop_like(d, a, "kill"),
        "start": lambda d, a: cmd_stop_like(d, a, "start"),
        "restart": lambda d, a: cmd_stop_like(d, a, "restart"),
        "wait": lambda d, a: cmd_stop_like(d, a, "wait"),
    }
    if command == "version":
        return cmd_version(rest)
    handler = handlers.get(command)
    if handler is not None:
        return handler(daemon, rest)
    if command.split()[-1] in NOT_EMULATED or command.startswith("image "):
        raise CliError(f"fake docker: 'docker {command}' is not emulated by the test harness", 1)
    raise CliError(
        f"docker: unknown command: docker {command}\n\nRun 'docker --help' for more information", 1
    )


# --------------------------------------------------------------------------------------------
# the "container": replay a log, serve HTTP after startup, obey control knobs


class ServeInfo(NamedTuple):
    model: str
    port: int
    api_keys: tuple[str, ...]
    key_source: str  # "arg" | "env" | "file" | "none" | "unreadable-file"
    max_model_len: int
    #: `--enable-auto-tool-choice` with a `--tool-call-parser`: tool calls come back parsed.
    auto_tool_choice: bool = False


def find_vllm_args(argv: Sequence[str]) -> list[str]:
    """Tokens of the ``vllm serve ...`` command, also when wrapped in ``sh -c '...'``."""
    tokens = list(argv)
    for idx, tok in enumerate(tokens):
        if idx + 1 < len(tokens) and os.path.basename(tok) == "vllm" and tokens[idx + 1] == "serve":
            return tokens[idx + 2 :]
    for tok in tokens:
        if "vllm" in tok and "serve" in tok and (" " in tok or "\n" in tok):
            with contextlib.suppress(ValueError):
                inner = find_vllm_args(shlex.split(tok, comments=True))
                if inner:
                    return inner
    return []


def option_value(args: Sequence[str], *names: str) -> str | None:
    value = None
    for idx, tok in enumerate(args):
        for name in names:
            if tok == name and idx + 1 < len(args):
                value = args[idx + 1]
            elif tok.startswith(name + "="):
                value = tok[len(name) + 1 :]
    return value


def serve_info(container: Container) -> ServeInfo:
    cfg = container.config
    args = find_vllm_args(container.command_argv())
    model = ""
    if args and not args[0].startswith("-"):
        model = args[0]
    model = option_value(args, "--model") or model or "unknown-model"
    served = option_value(args, "--served-model-name") or model
    port = int(option_value(args, "--port") or DEFAULT_VLLM_PORT)
    max_len = int(option_value(args, "--max-model-len") or 32768)
    env = dict(e.split("=", 1) for e in cfg.get("Env", []) if "=" in e)
    tools = "--enable-auto-tool-choice" in args and bool(option_value(args, "--tool-call-parser"))
    arg_key = option_value(args, "--api-key")
    if arg_key:
        return ServeInfo(served, port, (arg_key,), "arg", max_len, tools)
    if env.get("VLLM_API_KEY"):
        return ServeInfo(served, port, (env["VLLM_API_KEY"],), "env", max_len, tools)
    for mount in cfg.get("Mounts", []):
        if mount.get("Type") == "bind" and mount.get("Destination") == API_KEY_MOUNT:
            try:
                # What ``$(cat /run/secrets/vllm_api_key)`` yields: trailing newlines dropped.
                key = Path(mount["Source"]).read_text().rstrip("\n")
            except OSError:
                return ServeInfo(served, port, (), "unreadable-file", max_len, tools)
            return ServeInfo(served, port, (key,) if key else (), "file", max_len, tools)
    return ServeInfo(served, port, (), "none", max_len, tools)


def tool_call(function: JSONDict) -> JSONDict:
    """The assistant message of a model that calls `function` (its first required argument
    "Paris"), as vLLM's tool-call parser hands it back: `content` null beside `tool_calls`
    (the same shape as tests/support/fakes/openai_server.py)."""
    parameters = function.get("parameters") or {}
    required = parameters.get("required") or list(parameters.get("properties") or {})
    call = {
        "id": "chatcmpl-tool-" + secrets.token_hex(16),
        "type": "function",
        "function": {
            "name": str(function.get("name", "")),
            "arguments": json.dumps({str(key): "Paris" for key in required[:1]}),
        },
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


#: How a build that starts can still fail to answer (a scenario's ``answers``): chat content
#: empty (null); all of it in the reasoning fields, cut at max_tokens (an unclosed thought:
#: vLLM's reasoning parsers give it all to `reasoning`); garbage (special tokens as text:
#: tpu-inference #3406); plain text where a tool call was asked for; a tool call whose arguments
#: are not JSON, or are `{}` (what vLLM's gemma4 parser returns for a call it could not parse);
#: HTTP 500 (vLLM's `GenerationError` answer, serving.py); or no answer at all (a hang).
ANSWER_FAILURES = (
    "empty_content",
    "reasoning_only",
    "garbage",
    "text_not_tool",
    "non_json_arguments",
    "empty_arguments",
    "http_500",
    "hang",
)
#: How long a hanging answer holds its connection: past any readiness bound a test sets.
HANG_SECONDS = 600.0


class VllmHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    #: "good", or one of ANSWER_FAILURES (chat completions only; /health and /v1/models answer).
    answers: str = "good"
    info: ServeInfo
    container: Container
    #: What ``GET /health`` answers. vLLM answers 200 while the engine is healthy and 503 once
    #: it is dead (``EngineDeadError``; vllm-project/vllm
    #: ``vllm/entrypoints/serve/instrumentator/health.py``); a scenario's ``health_status``
    #: models a server whose engine died right after ``Application startup complete.``.
    health_status: int = 200
    #: Prompt and generation tokens served so far (vllm:prompt_tokens_total, ...).
    tokens: tuple[float, float] = (0.0, 0.0)


class VllmHandler(http.server.BaseHTTPRequestHandler):
    """The few OpenAI-server routes the tpu-vllm scripts and smoke tests touch."""

    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    server: VllmHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _access_log(self, code: int) -> None:
        phrase = {
            200: "OK",
            401: "Unauthorized",
            404: "Not Found",
            400: "Bad Request",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }.get(code, "")
        with contextlib.suppress(OSError):
            self.server.container.append_log(
                "stdout",
                f"(APIServer pid=1) INFO:     {self.client_address[0]}:{self.client_address[1]} - "
                f'"{self.command} {self.path} HTTP/1.1" {code} {phrase}',
            )

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        if isinstance(body, (bytes, str)):
            data = body.encode() if isinstance(body, str) else body
        else:
            data = json.dumps(body, separators=(",", ":")).encode()  # Starlette's JSONResponse
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._access_log(code)

    def _authorized(self) -> bool:
        info = self.server.info
        if info.key_source == "none":
            return True
        header = self.headers.get("Authorization", "")
        return bool(info.api_keys) and any(header == f"Bearer {k}" for k in info.api_keys)

    def _models(self) -> JSONDict:
        info = self.server.info
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": info.model,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": info.model,
                    "parent": None,
                    "max_model_len": info.max_model_len,
                    "permission": [
                        {
                            "id": "modelperm-" + secrets.token_hex(16),
                            "object": "model_permission",
                            "created": created,
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

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/ping"):
            self._send(self.server.health_status, b"", "application/json")
        elif path == "/version":
            self._send(200, {"version": VLLM_VERSION})
        elif path == "/metrics":
            # vLLM serves prometheus_client's exposition (instrumentator/metrics.py, outside
            # /v1: no key asked), CONTENT_TYPE_LATEST.
            page = metrics_page(self.server.info.model, *self.server.tokens)
            self._send(200, page, "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            if not self._authorized():
                self._send(401, {"error": "Unauthorized"})
            else:
                self._send(200, self._models())
        else:
            self._send(404, {"detail": "Not Found"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._send(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON body", "type": "BadRequestError",
                                       "param": None, "code": 400}})  # fmt: skip
            return
        model = self.server.info.model
        if body.get("model") not in (None, model):
            message = f"The model `{body.get('model')}` does not exist."
            error = {"message": message, "type": "NotFoundError", "param": None, "code": 404}
            self._send(404, {"error": error})
            return
        created = int(time.time())
        usage = {"prompt_tokens": 17, "completion_tokens": 7, "total_tokens": 24}
        prompt, generated = self.server.tokens
        self.server.tokens = (prompt + 17, generated + 7)
        if path == "/v1/chat/completions":
            answers = self.server.answers
            if answers == "hang":
                time.sleep(HANG_SECONDS)
                return
            if answers == "http_500":
                error = {"message": "Internal server error", "type": "InternalServerError",
                         "param": None, "code": 500}  # fmt: skip
                self._send(500, {"error": error})
                return
            bad = {"empty_content": None, "reasoning_only": None, "garbage": "<pad><pad><pad>"}
            content = bad.get(answers, "Hi there, nice to meet you!")
            reply: JSONDict = {"role": "assistant", "content": content, "tool_calls": []}
            finish = "stop"
            if answers == "reasoning_only":
                thought = "The user wants a greeting in five words. Let me think about " * 8
                reply["reasoning"] = reply["reasoning_content"] = thought
                finish = "length"
            tools = body.get("tools") or []
            choice = body.get("tool_choice", "auto" if tools else "none")
            if tools and choice != "none":
                if choice == "auto" and not self.server.info.auto_tool_choice:
                    # vLLM's serving_chat.py refuses it without both flags.
                    text = ('"auto" tool choice requires --enable-auto-tool-choice and '
                            "--tool-call-parser to be set")  # fmt: skip
                    self._send(400, {"error": {"message": text, "type": "BadRequestError",
                                               "param": None, "code": 400}})  # fmt: skip
                    return
                if answers == "text_not_tool":  # the call stays text: no parser recognised it
                    reply["content"] = '<|tool_call>call:get_weather{city:"Paris"}<tool_call|>'
                else:
                    reply, finish = tool_call(tools[0].get("function") or {}), "tool_calls"
                    if answers == "non_json_arguments":
                        reply["tool_calls"][0]["function"]["arguments"] = "{city: Paris"
                    if answers == "empty_arguments":
                        reply["tool_calls"][0]["function"]["arguments"] = "{}"
            self._send(200, {
                "id": "chatcmpl-" + secrets.token_hex(16), "object": "chat.completion",
                "created": created, "model": model,
                "choices": [{"index": 0, "message": reply,
                             "logprobs": None, "finish_reason": finish}],
                "usage": usage,
            })  # fmt: skip
        else:
            # Raw completions on a -it model come back empty (seed 000): keep that trap.
            self._send(200, {
                "id": "cmpl-" + secrets.token_hex(16), "object": "text_completion",
                "created": created, "model": model,
                "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
            })  # fmt: skip


UVICORN_SHUTDOWN = (
    "Shutting down",
    "Waiting for application shutdown.",
    "Application shutdown complete.",
    "Finished server process [1]",
)


# The JAX persistent compilation cache, as vLLM on TPU keeps it: VLLM_XLA_CACHE_PATH defaults
# to ~/.cache/vllm/xla_cache (vllm envs.py), and JAX's LRU cache writes one `KEY-cache` file per
# compiled program (jax/_src/lru_cache.py), KEY hashing the program, versions, flags and
# topology (jax/_src/cache_key.py). The fake's KEY hashes the image, the serve flags that change
# programs and the subgraph named by tpu-inference's "Compilation of NAME --> {...}" line.
XLA_CACHE_MOUNT = "/root/.cache/vllm"
XLA_CACHE_SUBDIR = "xla_cache"
_COMPILED_RE = re.compile(r"Compilation of (.+?) finished in")
_NOT_IN_KEY = ("--port", "--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice")


def xla_cache_dir(container: Container) -> Path | None:
    """The host directory the container's XLA cache lands in (its ~/.cache/vllm bind mount)."""
    for mount in container.config.get("Mounts", []):
        if mount.get("Type") == "bind" and mount.get("Destination") == XLA_CACHE_MOUNT:
            return Path(mount["Source"]) / XLA_CACHE_SUBDIR
    return None


def xla_entry(container: Container, subject: str, size: int) -> tuple[str, bytes]:
    """(file name, content) of the cache entry for one compiled subgraph."""
    args = find_vllm_args(container.command_argv())
    keyed: list[str] = []
    skip_next = False
    for index, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if arg in _NOT_IN_KEY:
            has_value = index + 1 < len(args) and not args[index + 1].startswith("--")
            skip_next = has_value and arg != "--enable-auto-tool-choice"
            continue
        keyed.append(arg)
    material = json.dumps([normalize_image(str(container.config.get("Image"))), keyed, subject])
    key = hashlib.sha256(material.encode()).hexdigest()
    head = f"FAKE-XLA-EXECUTABLE {key}\n".encode()
    body = hashlib.sha256(key.encode()).digest() * (max(size - len(head), 0) // 32 + 1)
    function = subject.split(maxsplit=1)[0]
    return f"jit_{function}-{key}-cache", (head + body)[: max(size, len(head))]


class Boot:
    """One run of the container process (first start or a restart)."""

    def __init__(self, container: Container, log_name: str, scenario: JSONDict) -> None:
        self.container = container
        self.entries = load_fixture(resolve_fixture(log_name))
        # With `warm_log`, the boot reads the XLA cache: complete and intact, it replays the
        # warm log (compiles load from disk); otherwise the cold one, writing each entry as
        # its compilation finishes.
        self.xla_dir = xla_cache_dir(container) if scenario.get("warm_log") else None
        self.xla_bytes = int(scenario.get("xla_entry_bytes", 16384))
        self.warm = False
        if self.xla_dir is not None and self._cache_complete():
            self.entries = load_fixture(resolve_fixture(str(scenario["warm_log"])))
            self.warm = True
        self.speed = float(scenario.get("speed", 1.0)) or 1.0
        exit_at = scenario.get("exit_at")
        self.exit_at = float(exit_at) if exit_at is not None else None
        self.exit_code = int(scenario.get("exit_code", 137))
        self.health_status = int(scenario.get("health_status", 200))
        self.answers = str(scenario.get("answers", "good"))
        self.info = serve_info(container)
        self.sock: socket.socket | None = None
        self.server: VllmHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def _expected_entries(self) -> list[tuple[str, bytes]]:
        subjects = [m.group(1) for e in self.entries if (m := _COMPILED_RE.search(e.text))]
        return [xla_entry(self.container, s, self.xla_bytes) for s in subjects]

    def _cache_complete(self) -> bool:
        assert self.xla_dir is not None
        for name, content in self._expected_entries():
            try:
                if (self.xla_dir / name).read_bytes() != content:
                    return False
            except OSError:
                return False
        return True

    def _write_entry(self, text: str) -> None:
        """JAX's `LRUCache.put` (jax/_src/lru_cache.py): create the directory if missing, keep
        an entry that exists (`if cache_path.exists(): return`), else write it; as root, as
        the server in the vllm-tpu image (no USER in tpu-inference's docker/Dockerfile)."""
        match = _COMPILED_RE.search(text)
        if self.xla_dir is None or self.warm or not match:
            return
        name, content = xla_entry(self.container, match.group(1), self.xla_bytes)
        if (self.xla_dir / name).exists():
            return
        with contextlib.suppress(OSError):
            if write_as_root(self.container.daemon.root, self.xla_dir / name, content):
                return
            self.xla_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.xla_dir / f".{name}.tmp"
            tmp.write_bytes(content)
            os.replace(tmp, self.xla_dir / name)

    def _listen_port(self) -> int | None:
        cfg = self.container.config
        if cfg.get("NetworkMode") == "host":
            return self.info.port
        for _ip, host_port, ctr_port in cfg.get("Publish", []):
            if ctr_port == self.info.port and host_port:
                return int(host_port)
        return None  # bridge network, nothing published: unreachable from the host

    def _bind(self) -> bool:
        """Bind (no listen) up front like vLLM: connections are refused until startup ends."""
        port = self._listen_port()
        if port is None:
            return True
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            for line in (
                "(APIServer pid=1) Traceback (most recent call last):",
                '(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in <module>',
                "(APIServer pid=1)     sys.exit(main())",
                '(APIServer pid=1)   File "/workspace/vllm/vllm/entrypoints/openai/api_server.py",'
                " line 1964, in create_server_socket",
                "(APIServer pid=1)     sock.bind(addr)",
                "(APIServer pid=1) OSError: [Errno 98] Address already in use",
            ):
                self.container.append_log("stderr", line)
            return False
        self.sock = sock
        return True

    def _serve(self) -> None:
        if self.sock is None:
            return
        server = VllmHTTPServer(("127.0.0.1", 0), VllmHandler, bind_and_activate=False)
        server.socket.close()
        server.socket = self.sock
        server.server_address = self.sock.getsockname()
        server.info = self.info
        server.container = self.container
        server.health_status = self.health_status
        server.answers = self.answers
        server.server_activate()  # listen(): from here on connections succeed
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)  # fmt: skip
        self.thread.start()
        self.container.update_state(Ready=True)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        elif self.sock is not None:
            self.sock.close()
        self.sock = None
        self.container.update_state(Ready=False)

    def _wait(self, deadline: float) -> JSONDict | None:
        while True:
            control = self.container.take_control()
            if control is not None:
                return control
            if not self.container.dir.is_dir():
                return {"action": "kill"}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(POLL, remaining))

    def run(self) -> tuple[str, int, JSONDict | None]:
        """Replay; returns (outcome, exit_code, control) with outcome exit|stop|kill|restart."""
        if not self._bind():
            return "exit", 1, None
        if self.xla_dir is not None:
            self.container.update_state(XlaCache="warm" if self.warm else "cold")
        t0 = time.monotonic()
        try:
            for entry in self.entries:
                at = entry.at
                if self.exit_at is not None and at >= self.exit_at:
                    control = self._wait(t0 + self.exit_at / self.speed)
                    if control is not None:
                        return self._control(control)
                    return "exit", self.exit_code, None
                control = self._wait(t0 + at / self.speed)
                if control is not None:
                    return self._control(control)
                if entry.stream == "directive":
                    verb, _, value = entry.text.partition(" ")
                    if verb == "exit":
                        return "exit", int(value or 0), None
                    continue
                self.container.append_log(
                    entry.stream, entry.text.replace("${PORT}", str(self.info.port))
                )
                self._write_entry(entry.text)
                if READY_MARKER in entry.text:
                    self._serve()
            if self.exit_at is not None:
                control = self._wait(t0 + self.exit_at / self.speed)
                if control is not None:
                    return self._control(control)
                return "exit", self.exit_code, None
            while True:
                control = self._wait(time.monotonic() + 3600)
                if control is not None:
                    return self._control(control)
        finally:
            self.close()

    def _control(self, control: JSONDict) -> tuple[str, int, JSONDict | None]:
        action = str(control.get("action", ""))
        if action == "stop":
            if self.server is not None:
                for line in UVICORN_SHUTDOWN:
                    self.container.append_log("stderr", "(APIServer pid=1) INFO:     " + line)
            return "stop", int(control.get("code", 0)), control
        if action == "restart":
            return "restart", int(control.get("code", 1)), control
        if action == "exit":
            for line in control.get("lines", []):
                self.container.append_log("stderr", str(line))
            return "exit", int(control.get("code", 137)), control
        return "kill", 137, control


def should_restart(policy: JSONDict, code: int, restarts: int) -> bool:
    name = policy.get("Name", "no")
    if name in ("always", "unless-stopped"):
        return True
    if name == "on-failure":
        limit = int(policy.get("MaximumRetryCount", 0))
        return code != 0 and (limit == 0 or restarts < limit)
    return False


def supervise(state_root: str, cid: str) -> int:
    """Main loop of the container process; exits when the container stops for good."""
    daemon = Daemon(Path(state_root))
    container = Container(daemon, cid)
    cfg = container.config
    scenario = dict(cfg.get("Scenario", {}))
    log_name = str(scenario.get("log", "v5e1_ready.log"))
    restarts = int(container.raw_state().get("RestartCount", 0))
    backoff = 0.1
    while True:
        try:
            outcome, code, control = Boot(container, log_name, scenario).run()
        except Exception as exc:  # a harness bug: make it visible in the container log
            container.append_log("stderr", f"fake docker supervisor error: {exc!r}")
            container.update_state(
                Status="exited", Running=False, Restarting=False, Pid=0, ExitCode=255,
                FinishedAt=rfc3339nano(), Ready=False,
            )  # fmt: skip
            raise
        if not container.dir.is_dir():
            return 0
        policy_restart = outcome == "restart" or (
            outcome == "exit" and should_restart(cfg.get("RestartPolicy", {}), code, restarts)
        )
        finished = rfc3339nano()
        if not policy_restart:
            container.update_state(
                Status="exited", Running=False, Restarting=False, Pid=0, ExitCode=code,
                FinishedAt=finished, Ready=False, StoppedByUser=outcome in ("stop", "kill"),
            )  # fmt: skip
            if cfg.get("AutoRemove"):
                shutil.rmtree(container.dir, ignore_errors=True)
            return 0
        st = container.raw_state()
        container.update_state(
            Status="restarting", Running=True, Restarting=True, ExitCode=code,
            FinishedAt=finished, Ready=False, Boot=int(st.get("Boot", 0)) + 1,
        )  # fmt: skip
        delay = 0.05 if outcome == "restart" else backoff
        backoff = min(backoff * 2, 1.0)
        time.sleep(delay)
        restarts += 1
        container.update_state(
            Status="running", Running=True, Restarting=False, RestartCount=restarts,
            StartedAt=rfc3339nano(), ExitCode=0 if outcome == "restart" else code,
        )  # fmt: skip
        if control and control.get("log"):
            log_name = str(control["log"])
        elif scenario.get("restart_log"):
            log_name = str(scenario["restart_log"])
        if control and "speed" in control:
            scenario["speed"] = control["speed"]


# --------------------------------------------------------------------------------------------
# sudo


SUDO_USAGE = (
    "usage: sudo -h | -K | -k | -V\n"
    "usage: sudo -v [-ABkNnS] [-g group] [-h host] [-p prompt] [-u user]\n"
    "usage: sudo -l [-ABkNnS] [-g group] [-h host] [-p prompt] [-U user] [-u user] "
    "[command [arg ...]]\n"
    "usage: sudo [-ABbEHkNnPS] [-r role] [-t type] [-C num] [-D directory] [-g group] [-h host] "
    "[-p prompt] [-R directory] [-T timeout] [-u user] [VAR=value] [-i | -s] [command [arg ...]]\n"
    "usage: sudo -e [-ABkNnS] [-r role] [-t type] [-C num] [-D directory] [-g group] [-h host] "
    "[-p prompt] [-R directory] [-T timeout] [-u user] file ..."
)
_SUDO_KEEP_ALWAYS = ("TERM", "COLORTERM", "DISPLAY", "LANG", "LANGUAGE", "XAUTHORITY")


def sudo_main(argv: list[str]) -> int:
    """Emulate ``sudo`` with Debian's defaults (env_reset, secure_path), minus the privileges.

    The command still runs as the SSH user (there is no setuid here), but its environment is
    what real sudo would give it: only TERM/LANG/LC_* and the harness's own plumbing variables
    survive, HOME/USER/LOGNAME/SHELL are root's, PATH is secure_path (with the fake bin dir
    first) and SUDO_USER/SUDO_UID/SUDO_GID/SUDO_COMMAND are set. So a script that relies on an
    exported variable crossing ``sudo`` fails here as it would on the VM.
    """
    with contextlib.suppress(CliError):
        Daemon.from_env().record("sudo", ["sudo", *argv])
    preserve_all = False
    preserve: list[str] = []
    shell = False
    login = False
    set_home = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name == "preserve-env":
                if eq:
                    preserve += [v for v in value.split(",") if v]
                else:
                    preserve_all = True
            elif name in ("user", "group", "prompt", "host", "chdir", "close-from", "role",
                          "type", "command-timeout", "chroot", "other-user"):  # fmt: skip
                if not eq:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                if name == "user" and value not in ("root", "0", "#0"):
                    sys.stderr.write(f"sudo: fake sudo only runs commands as root, not {value!r}\n")
                    return 1
            elif name == "shell":
                shell = True
            elif name == "login":
                login = True
            elif name == "set-home":
                set_home = True
            elif name in ("non-interactive", "stdin", "reset-timestamp", "remove-timestamp",
                          "preserve-groups", "askpass", "bell", "background"):  # fmt: skip
                pass
            else:
                sys.stderr.write(f"sudo: unrecognized option '--{name}'\n{SUDO_USAGE}\n")
                return 1
        else:
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter in "ugphCDrtTRUc":
                    value = arg[j + 1 :]
                    if not value:
                        i += 1
                        value = argv[i] if i < len(argv) else ""
                    if letter == "u" and value not in ("root", "0", "#0"):
                        sys.stderr.write(
                            f"sudo: fake sudo only runs commands as root, not {value!r}\n"
                        )
                        return 1
                    break
                if letter == "E":
                    preserve_all = True
                elif letter == "s":
                    shell = True
                elif letter == "i":
                    login = True
                elif letter == "H":
                    set_home = True
                elif letter not in "nSkKABbNP":
                    sys.stderr.write(f"sudo: invalid option -- '{letter}'\n{SUDO_USAGE}\n")
                    return 1
                j += 1
        i += 1
    rest = list(argv[i:])
    assignments: list[tuple[str, str]] = []
    while rest and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", rest[0]):
        key, _, value = rest.pop(0).partition("=")
        assignments.append((key, value))
    if not rest and not (shell or login):
        sys.stderr.write(SUDO_USAGE + "\n")
        return 1

    root_home = os.environ.get("FAKE_ROOT_HOME", "/root")
    keep_names = set(_SUDO_KEEP_ALWAYS)
    keep_names.update(n for n in os.environ.get("FAKE_SUDO_KEEP", "").split(",") if n)
    keep_names.update(preserve)
    if preserve_all:
        env = dict(os.environ)
    else:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in keep_names or k.startswith("LC_") or k.startswith("FAKE_")
        }
    if not preserve_all or set_home or login:
        env["HOME"] = root_home
    env.update(USER="root", LOGNAME="root", SHELL="/bin/bash", MAIL="/var/mail/root")
    env["PATH"] = os.environ.get("FAKE_SUDO_PATH", SUDO_SECURE_PATH)
    user = pwd.getpwuid(os.getuid()).pw_name
    env.update(SUDO_USER=user, SUDO_UID=str(os.getuid()), SUDO_GID=str(os.getgid()))
    for key, value in assignments:
        env[key] = value
    if shell or login:
        command = ["/bin/bash"] + (["-c", " ".join(rest)] if rest else [])
        if login:
            with contextlib.suppress(OSError):
                os.chdir(root_home)
    else:
        command = rest
    program = command[0]
    if "/" not in program:
        found = shutil.which(program, path=env["PATH"])
        if found is None:
            sys.stderr.write(f"sudo: {program}: command not found\n")
            return 1
        program = found
    env["SUDO_COMMAND"] = " ".join([program, *command[1:]])
    if os.path.basename(program) in ROOT_HELPER_TOOLS and os.environ.get("FAKE_DOCKER_STATE"):
        # As real root, through this fake VM's root helper (when the tests run as root).
        request = {"op": "exec", "argv": [program, *command[1:]], "env": env, "cwd": os.getcwd()}
        try:
            answer = root_helper_request(Path(os.environ["FAKE_DOCKER_STATE"]), request, [0, 1, 2])
        except OSError as exc:
            sys.stderr.write(f"sudo: {exc}\n")
            return 1
        if answer is not None and answer.get("privileged"):
            return int(answer.get("code", 1))
    try:
        os.execve(program, command, env)  # noqa: S606 - exec without a shell is what sudo does
    except OSError as exc:
        sys.stderr.write(f"sudo: unable to execute {program}: {exc.strerror}\n")
    return 126


# --------------------------------------------------------------------------------------------
# entry point


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # The shims disable PEP 538 locale coercion (it would inject LC_CTYPE into the environment
    # we record and pass on); drop the variables they added so the recorded env is the caller's.
    for name in os.environ.pop("FAKE_SHIM_ENV", "").split(","):
        if name:
            os.environ.pop(name, None)
    if not args:
        sys.stderr.write("usage: fake_docker.py docker|sudo|__supervise__ ...\n")
        return 2
    tool, rest = args[0], args[1:]
    if tool == "__supervise__":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return supervise(rest[0], rest[1])
    if tool == "sudo":
        return sudo_main(rest)
    if tool != "docker":
        sys.stderr.write(f"fake_docker.py: unknown tool {tool!r}\n")
        return 2
    try:
        return docker_main(rest)
    except CliError as exc:
        if exc.stdout:
            Out.out(exc.stdout)
        if exc.message:
            Out.err(exc.message + "\n")
        return exc.code
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
