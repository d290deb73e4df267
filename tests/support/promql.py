"""PromQL and Prometheus configs, checked by Prometheus' own code: a tiny Go program built once.

Why this parser: it is the one Prometheus evaluates queries with
(`github.com/prometheus/prometheus/promql/parser`, pinned in tests/support/promql_check/go.mod at
v0.316.0, i.e. Prometheus 3.16; go.sum pins every module's hash), and Cloud Monitoring's PromQL
follows upstream's syntax ("PromQL in Cloud Monitoring"). No PyPI package wraps that parser; the
Python packages that parse PromQL are reimplementations. The binary is built into
tests/support/promql_check/.bin/, named after the hash of its sources, so a change rebuilds it and
an unchanged checkout builds it once; a lock keeps parallel test workers from building it twice.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "promql_check"
#: Prometheus 2.44's parser (v0.44.0), for the names Managed Service for Prometheus evaluates.
SOURCE_2_44 = Path(__file__).resolve().parent / "promql_2_44"
BUILD_TIMEOUT = 900  # a cold module cache downloads the parser's dependencies first


def go_command(why: str) -> str:
    """The go command, or an error that says what it is needed for and how to get it."""
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise RuntimeError(
            f"These tests need the Go toolchain (`go` on PATH) {why}: Go 1.26.7 or later from "
            "go.dev/dl (distribution packages are older)."
        )
    return go


def _binary(source: Path = SOURCE) -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((source / name).read_bytes())
    target = source / ".bin" / f"{source.name}-{digest.hexdigest()[:16]}"
    if target.exists():
        return target
    go = go_command(f"to build Prometheus' parser from tests/{source.name}")
    target.parent.mkdir(exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            partial = target.with_suffix(".partial")
            env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
            subprocess.run(
                [go, "build", "-o", str(partial), "."],
                cwd=source,
                env=env,
                check=True,
                timeout=BUILD_TIMEOUT,
            )
            partial.rename(target)
    return target


def parse_errors(expressions: Sequence[str]) -> dict[str, str]:
    """{expression: parser error} for each expression that does not parse."""
    done = subprocess.run(
        [str(_binary())],
        input=json.dumps(list(expressions)),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    errors = json.loads(done.stdout)
    return {e: err for e, err in zip(expressions, errors, strict=True) if err}


def prometheus_config_error(config_yaml: str) -> str:
    """Prometheus' own `config.Load` error for a configuration, "" when it loads."""
    done = subprocess.run(
        [str(_binary()), "-config"],
        input=config_yaml,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    message: str = json.loads(done.stdout)
    return message


@functools.cache
def prometheus_2_44_names() -> frozenset[str]:
    """Prometheus 2.44's PromQL functions and aggregation operators, from its own parser
    (tests/support/promql_2_44): what Managed Service for Prometheus can evaluate."""
    done = subprocess.run(
        [str(_binary(SOURCE_2_44))], capture_output=True, text=True, check=True, timeout=60
    )
    return frozenset(done.stdout.split())
