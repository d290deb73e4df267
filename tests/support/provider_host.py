"""Run a dynamic provider the way Pulumi's provider host does: unpickled in a fresh process.

The Python dynamic provider host (`pulumi/dynamic/__main__.py`) receives the provider as the
dill-pickled `__provider` prop and imports what it references from the project root. Tests take
that blob from a mocked run of the program and call the provider in a new interpreter there.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from tests.support.pulumi_program import ROOT, ProgramRun

#: Prefix of every script: `provider` is the unpickled object.
UNPICKLE = "import base64, sys, dill\nprovider = dill.loads(base64.b64decode(sys.argv[1]))\n"


def provider_blob(run: ProgramRun, name: str) -> str:
    """The base64 `__provider` of the dynamic resource called `name`."""
    [resource] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if r.name == name]
    blob: Any = resource.inputs["__provider"]
    return str(blob["value"] if isinstance(blob, dict) else blob)


def run_provider(
    blob: str, script: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`UNPICKLE + script` in a fresh interpreter in the project root, with only `env`."""
    return subprocess.run(
        [sys.executable, "-c", UNPICKLE + script, blob],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
