"""A fake `pulumi` CLI on PATH: `stack output --json` and `up`, with the real CLI's failures.

Operator scripts (`scripts/renew.py`) drive the real CLI as a subprocess, so their tests put this
fake first on PATH. It records every call's argv and working directory, serves each stack's
outputs from a JSON state file, and can be told to fail a command the way the CLI fails. What it
imitates, and where that comes from:

* Every error is one `error: ...` line on stderr and exit status 255 (pulumi/pulumi's
  `cmdutil.ExitError`; seen in pulumi/circleci#35 and pulumi/actions#1383).
* An unknown stack: `error: no stack named 'NAME' found` (pulumi/pulumi `pkg/cmd/pulumi/
  stack.go`, `requireStack`).
* `stack output --json` prints the outputs as a JSON object (`{}` for a stack without outputs),
  and secret values as `"[secret]"` unless `--show-secrets` is given (the command's help:
  "--show-secrets  Display outputs which are marked as secret in plaintext").
* `up` without a TTY and without `--yes`/`--skip-preview`: `error: --yes or --skip-preview must be
  passed in to proceed when running in non-interactive mode` (pulumi/pulumi#12036).

`up` succeeds by default, prints progress and the stack's `Outputs:` in the CLI's shape (secrets
as `[secret]`), after replacing the outputs with `after_up` when a test gives it (the renewed
node's new address and expiry).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# The executable: stdlib only, run by this interpreter. It reads and updates state.json beside
# itself and appends one JSON line per call to calls.jsonl.
SCRIPT = r"""#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
state_path = os.path.join(here, "state.json")
with open(state_path) as f:
    state = json.load(f)
argv = sys.argv[1:]
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": argv, "cwd": os.getcwd(),
                          "env": {{k: os.environ.get(k) for k in state["watch_env"]}}}}) + "\n")

def fail(message):
    sys.stderr.write("error: " + message + "\n")
    sys.exit(255)

def flag(name):
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None

stack = flag("-s") or flag("--stack") or state.get("current")
command = " ".join(a for a in argv[:2] if not a.startswith("-"))
if command.startswith("up"):
    command = "up"
forced = state["fail"].get(command)
if forced:
    fail(forced)
if stack not in state["stacks"]:
    fail("no stack named '%s' found" % stack)
entry = state["stacks"][stack]
if command == "stack output":
    if "--json" not in argv:
        fail("this fake serves only `pulumi stack output --json`")
    secret = set(entry.get("secrets", []))
    shown = {{k: ("[secret]" if k in secret and "--show-secrets" not in argv else v)
             for k, v in entry["outputs"].items()}}
    sys.stdout.write(json.dumps(shown, indent=4) + "\n")
elif command == "up":
    if "--yes" not in argv and "-y" not in argv and "--skip-preview" not in argv:
        fail("--yes or --skip-preview must be passed in to proceed when running in "
             "non-interactive mode")
    sys.stdout.write("Updating (%s)\n\n" % stack)
    if "--refresh" in argv:
        sys.stdout.write("    pulumi:pulumi:Stack tpu-vllm-%s refreshing\n" % stack)
    sys.stdout.write("    pulumi:pulumi:Stack tpu-vllm-%s running\n" % stack)
    if entry.get("after_up") is not None:
        entry["outputs"] = entry.pop("after_up")
        with open(state_path, "w") as f:
            json.dump(state, f)
    sys.stdout.write("\nOutputs:\n")
    for key, value in sorted(entry["outputs"].items()):
        shown = "[secret]" if key in entry.get("secrets", []) else json.dumps(value)
        sys.stdout.write("    %s: %s\n" % (key, shown))
    sys.stdout.write("\nResources:\n    ~ 1 updated\n\nDuration: 14m17s\n")
else:
    fail("this fake does not implement `pulumi %s`" % " ".join(argv))
"""


class FakePulumi:
    """A `pulumi` executable in `bin_dir`; put `bin_dir` first on PATH to use it."""

    def __init__(self, bin_dir: Path, watch_env: tuple[str, ...] = ()) -> None:
        self.bin_dir = bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)
        executable = bin_dir / "pulumi"
        executable.write_text(SCRIPT.format(python=sys.executable), encoding="utf-8")
        executable.chmod(0o755)
        self._state: dict[str, Any] = {
            "stacks": {},
            "fail": {},
            "current": None,
            "watch_env": list(watch_env),
        }
        self._save()

    def _save(self) -> None:
        (self.bin_dir / "state.json").write_text(json.dumps(self._state), encoding="utf-8")

    def _load(self) -> dict[str, Any]:
        return dict(json.loads((self.bin_dir / "state.json").read_text(encoding="utf-8")))

    def add_stack(
        self,
        name: str,
        outputs: Mapping[str, Any],
        *,
        secrets: tuple[str, ...] = (),
        after_up: Mapping[str, Any] | None = None,
    ) -> None:
        """A stack with these outputs; `after_up` replaces them when `pulumi up` succeeds."""
        self._state = self._load()
        self._state["stacks"][name] = {
            "outputs": dict(outputs),
            "secrets": list(secrets),
            "after_up": dict(after_up) if after_up is not None else None,
        }
        self._save()

    def fail(self, command: str, message: str) -> None:
        """Make `pulumi COMMAND` (`stack output`, `up`) fail with `error: MESSAGE`, exit 255."""
        self._state = self._load()
        self._state["fail"][command] = message
        self._save()

    def outputs(self, stack: str) -> dict[str, Any]:
        return dict(self._load()["stacks"][stack]["outputs"])

    def calls(self) -> list[dict[str, Any]]:
        """Every call so far: `{"argv": [...], "cwd": ..., "env": {watched: value}}`."""
        log = self.bin_dir / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]


@pytest.fixture
def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePulumi]:
    """A fake `pulumi` first on PATH for this test."""
    fake = FakePulumi(tmp_path / "pulumi-bin", watch_env=("TPU_API_ENDPOINT",))
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield fake
