"""The language host and pulumi-command the engine runs make it do what the real tools make it do.

Where the stand-ins (tests/support/standins/language_host.py, command_provider.py) take the place of
the tools the Go module proxy refuses (tests/support/engine_cli.py; a real one always wins), each
test here runs a small project through the built CLI and checks one behaviour a user would notice if
the stand-in got it wrong, as the real tools define it:

- a dynamic provider's pickle crosses processes: the program pickles it (dill, by reference for
  a class in an importable module of the project) and the engine's provider host, another
  process, unpickles and runs it, also for a `pulumi destroy` that runs no program
  (pulumi/pulumi `sdk/python/lib/pulumi/dynamic/__main__.py`);
- a secret config value reaches the program as a secret: `pulumi config set --secret` is
  decrypted by the CLI and handed over with its key among the secret keys (the Go host's
  `constructConfig`/`constructConfigSecretKeys`), and stays out of plain outputs and state;
- a `remote.Command` whose create fails fails `pulumi up` with pulumi-command's error (its exit
  status, the command, the output: `provider/pkg/provider/remote/commandOutputs.go`, `run`),
  the stderr among it; pulumi-command 1.2.1 returns no partial state for it, so the engine
  records nothing and the next `up` creates it anew;
- a program that raises fails the run with its traceback (the exec script's "Program failed
  with an unhandled exception", the Go host's bail), and the engine deletes nothing the program
  did not get to register.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import engine, engine_cli

if TYPE_CHECKING:  # imported for real by pytest_plugins, so pytest can assert-rewrite it
    from tests.support.fakes.ssh_host import SshHostFactory

pytest_plugins = ("tests.support.fakes.ssh_host",)
pytestmark = pytest.mark.engine

SECRET = "standin-config-secret-sentinel-5d1e"


@dataclass
class Project:
    """A Pulumi project on disk, its stack on a file backend, and the CLI that runs there."""

    root: Path
    env: dict[str, str]

    def pulumi(
        self, *args: str, stdin: str | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS` here; `stdin` for a value that must not be in argv (a key)."""
        return subprocess.run(
            [engine_cli.pulumi(), *args],
            env=self.env,
            cwd=self.root,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = self.pulumi(*args, stdin=stdin)
        assert done.returncode == 0, f"pulumi {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def state_text(self) -> str:
        return "".join(p.read_text() for p in (self.root.parent / "state").rglob("*.json"))


def project(
    tmp: Path,
    name: str,
    files: dict[str, str],
    *,
    config: Sequence[str] = (),
    main: str | None = None,
) -> Project:
    """`files` under tmp/NAME with a Pulumi.yaml that names this interpreter's virtualenv (as
    the project's own does: runtime.options.virtualenv) and `main` if given, and a stack `dev`
    on a file backend."""
    root = tmp / name
    root.mkdir()
    venv = Path(engine.PYTHON).parent.parent
    manifest = f"name: {name}\nruntime:\n  name: python\n  options:\n    virtualenv: {venv}\n"
    (root / "Pulumi.yaml").write_text(manifest + (f"main: {main}\n" if main else ""))
    for file, text in files.items():
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text(textwrap.dedent(text))
    env = engine_cli.environment(tmp)
    made = Project(root, env)
    made.ok("login", env["PULUMI_BACKEND_URL"])
    made.ok("stack", "init", "dev")
    for line in config:
        made.ok("config", "set", *line.split(" "))
    return made


PICKLE_PROVIDER = '''
"""A dynamic provider in an importable module: dill pickles its class by reference."""
import os

from pulumi.dynamic import CreateResult, ResourceProvider


class Marker(ResourceProvider):
    def create(self, props):
        path = props["path"]
        with open(path, "w") as out:
            out.write(str(os.getpid()))
        return CreateResult(id_=path, outs={**props, "provider_pid": os.getpid()})

    def delete(self, _id, props):
        os.remove(props["path"])
'''

PICKLE_PROGRAM = """
import os

import pulumi
from pulumi.dynamic import Resource

from marker import Marker


class Made(Resource):
    provider_pid: pulumi.Output[int]

    def __init__(self, name, path):
        super().__init__(Marker(), name, {"path": path, "provider_pid": None})


made = Made("made", pulumi.Config().require("path"))
pulumi.export("program_pid", os.getpid())
pulumi.export("provider_pid", made.provider_pid)
"""


def test_a_dynamic_provider_pickled_by_the_program_runs_in_the_engines_provider_host(
    tmp_path: Path,
) -> None:
    target = tmp_path / "made-by-the-provider"
    proj = project(
        tmp_path,
        "pickle",
        {"__main__.py": PICKLE_PROGRAM, "marker.py": PICKLE_PROVIDER},
        config=[f"path {target}"],
    )
    proj.ok("up", "--yes")
    outputs = json.loads(proj.ok("stack", "output", "--json").stdout)
    # Created by another process than the program's: the provider host unpickled it.
    assert target.read_text() == str(outputs["provider_pid"])
    assert outputs["provider_pid"] != outputs["program_pid"]
    state = json.loads(proj.ok("stack", "export", "--show-secrets").stdout)
    [made] = [r for r in state["deployment"]["resources"] if r["urn"].endswith("::made")]
    # dill pickled the class by reference to its module, which the provider host imported.
    provider = made["inputs"]["__provider"]  # secret in the state: {"plaintext": "\"...\""}
    pickled = base64.b64decode(json.loads(provider["plaintext"]))
    assert b"marker" in pickled and b"Marker" in pickled
    assert b"def create" not in pickled and b"co_code" not in pickled
    # A second up runs the program again and changes nothing; destroy runs no program at all:
    # the provider host unpickles the provider from the state alone.
    proj.ok("up", "--yes", "--expect-no-changes")
    proj.ok("destroy", "--yes")
    assert not target.exists()


SECRET_PROGRAM = (
    '''
import pulumi
from pulumi.runtime.config import is_config_secret

config = pulumi.Config()
token = config.require_secret("token")
plain = config.get("token")
pulumi.export("token", token)
pulumi.export("key_is_secret", is_config_secret("secret:token"))
pulumi.export("token_length", token.apply(len))
pulumi.export("plain_matches", plain == "'''
    + SECRET
    + """")
"""
)


def test_a_secret_config_value_reaches_the_program_as_a_secret(tmp_path: Path) -> None:
    proj = project(tmp_path, "secret", {"__main__.py": SECRET_PROGRAM})
    proj.ok("config", "set", "--secret", "token", SECRET)
    up = proj.ok("up", "--yes")
    hidden = json.loads(proj.ok("stack", "output", "--json").stdout)
    shown = json.loads(proj.ok("stack", "output", "--json", "--show-secrets").stdout)
    assert hidden["token"] == "[secret]" and shown["token"] == SECRET
    assert shown["plain_matches"] is True  # the CLI decrypted it before the program ran
    assert shown["key_is_secret"] is True  # and said which keys are secret
    assert hidden["token_length"] == "[secret]"  # secretness flows through apply
    assert SECRET not in up.stdout + up.stderr
    assert SECRET not in proj.state_text()


MAIN_PROGRAM = """
import os
import sys

import pulumi

import helper  # beside the program: its directory is importable, as runpy makes it

pulumi.export("cwd", os.getcwd())
pulumi.export("argv0", sys.argv[0])
pulumi.export("helper", helper.NAME)
pulumi.export("prefix", sys.prefix)
"""


def use_virtualenv(proj: Project, venv: str) -> None:
    """Pulumi.yaml's `runtime.options.virtualenv` set to `venv` (relative to the root)."""
    manifest = proj.root / "Pulumi.yaml"
    text = re.sub(r"virtualenv: .*", f"virtualenv: {venv}", manifest.read_text())
    manifest.write_text(text)


def test_pulumi_yaml_main_names_the_program_and_its_directory(tmp_path: Path) -> None:
    """`main: app/` runs app/__main__.py in app/, and the virtualenv named relative to the
    project root (not to app/, where the CLI starts the host) runs it."""
    files = {"app/__main__.py": MAIN_PROGRAM, "app/helper.py": "NAME = 'beside the program'\n"}
    proj = project(tmp_path, "main", files, main="app/")
    (proj.root / "venv-here").symlink_to(Path(engine.PYTHON).parent.parent)
    use_virtualenv(proj, "venv-here")
    proj.ok("up", "--yes")
    outputs = json.loads(proj.ok("stack", "output", "--json").stdout)
    assert Path(outputs["cwd"]).resolve() == (proj.root / "app").resolve()
    assert outputs["helper"] == "beside the program"
    assert outputs["argv0"] == "."  # the engine's entry point, as the exec script's sys.argv
    assert Path(outputs["prefix"]).resolve() == (proj.root / "venv-here").resolve()


def test_a_virtualenv_that_does_not_exist_fails_naming_it_and_the_fix(tmp_path: Path) -> None:
    """Named relative to the project root, also when `main:` puts the program below it."""
    proj = project(tmp_path, "novenv", {"app/__main__.py": "import pulumi\n"}, main="app/")
    use_virtualenv(proj, "no-such-venv")
    done = proj.pulumi("preview")
    assert done.returncode != 0
    shown = done.stdout + done.stderr
    assert f"The virtual environment {proj.root / 'no-such-venv'}" in shown, shown
    assert "python3 -m venv" in shown


TWO_MARKERS = """
import pulumi
from pulumi.dynamic import Resource

from marker import Marker


class Made(Resource):
    def __init__(self, name):
        super().__init__(Marker(), name, {"path": config.require(name), "provider_pid": None})


config = pulumi.Config()
Made("first")
if config.get_bool("fail"):
    raise ValueError("the program says no: 41ac")
Made("second")
"""


RAISE_LINE = TWO_MARKERS.splitlines().index('    raise ValueError("the program says no: 41ac")') + 1


def test_a_program_that_raises_fails_the_run_and_deletes_nothing(tmp_path: Path) -> None:
    """The exec script catches the program's exception outside `run_in_stack`, so the engine
    is never told the program finished: what it did not get to register is not deleted."""
    first, second = tmp_path / "first", tmp_path / "second"
    proj = project(
        tmp_path,
        "raises",
        {"__main__.py": TWO_MARKERS, "marker.py": PICKLE_PROVIDER},
        config=[f"first {first}", f"second {second}"],
    )
    proj.ok("up", "--yes")
    assert first.exists() and second.exists()
    proj.ok("config", "set", "fail", "true")
    for command in (["preview"], ["up", "--yes"]):
        done = proj.pulumi(*command)
        assert done.returncode != 0, command
        assert "Program failed with an unhandled exception" in done.stdout, done.stdout
        assert "ValueError: the program says no: 41ac" in done.stdout
        assert f'__main__.py", line {RAISE_LINE}' in done.stdout  # the user's frame first
        assert "delete" not in done.stdout, done.stdout
    assert first.exists() and second.exists()
    state = json.loads(proj.ok("stack", "export").stdout)
    names = {r["urn"].rsplit("::", 1)[-1] for r in state["deployment"]["resources"]}
    assert {"first", "second"} <= names


COMMAND_PROGRAM = """
import pulumi
import pulumi_command as command

config = pulumi.Config()
connection = command.remote.ConnectionArgs(
    host=config.require("host"),
    port=config.require_int("port"),
    user=config.require("user"),
    private_key=config.require_secret("key"),
    host_key=config.require("hostKey"),
)
step = command.remote.Command("step", connection=connection, create=config.require("create"))
pulumi.export("stdout", step.stdout)
"""
FAILING = 'echo made-it; echo "the disk is full: 7f2a" >&2; exit 3'


def test_a_remote_command_whose_create_fails_fails_up_with_its_stderr(
    tmp_path: Path, ssh_host_factory: SshHostFactory
) -> None:
    host = ssh_host_factory()
    connection: dict[str, Any] = host.connection_kwargs()
    proj = project(tmp_path, "command", {"__main__.py": COMMAND_PROGRAM})
    for key in ("host", "port", "user"):
        proj.ok("config", "set", key, str(connection[key]))
    proj.ok("config", "set", "hostKey", "--", connection["host_key"])
    proj.ok("config", "set", "--secret", "key", stdin=connection["private_key"])
    proj.ok("config", "set", "create", FAILING)

    up = proj.pulumi("up", "--yes")
    assert up.returncode != 0
    shown = up.stdout + up.stderr
    assert "Process exited with status 3" in shown, shown
    assert f"running {json.dumps(FAILING)}" in shown  # the command, quoted as Go's %q does
    assert "the disk is full: 7f2a" in shown  # its stderr
    state = json.loads(proj.ok("stack", "export").stdout)
    kinds = [r["type"] for r in state["deployment"].get("resources") or []]
    assert "command:remote:Command" not in kinds  # no partial state: nothing recorded

    proj.ok("config", "set", "create", "echo made-it")
    proj.ok("up", "--yes")
    assert json.loads(proj.ok("stack", "output", "--json").stdout)["stdout"] == "made-it"
