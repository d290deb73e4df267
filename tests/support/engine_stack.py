"""A stack deployed through the real Pulumi CLI against the loopback fakes: the `engine` tests.

What runs for real: the CLI, the Python language host with the virtualenv `Pulumi.yaml` names,
the program (`__main__.py`), the dynamic provider host unpickling the program's providers,
pulumi-command's own SSH client, the file backend's state and its secrets encryption, and the
operator scripts (`save_hf_token.py`, `renew.py`). What stands in: the Google APIs (the loopback
fakes in tests/support/fakes/, each the program reaches through an endpoint override a user could
set too) and the gcp/random/tls providers (tests/support/standins/, real gRPC provider processes).
Each node the fake TPU API creates is a VM of its own (tests/support/fakes/tpu_vm.py) with a real
sshd on its port 22.

`EngineStack` copies the project into a temporary directory (as a clean clone would have it,
with `.venv` linked to the virtualenv running the tests), starts the fakes, and runs the README's
commands there with an environment that keeps the CLI offline and its state inside the copy.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest

from components.config.loader import StackConfig
from tests.support import engine_cli, privileged
from tests.support.fakes import tpu_vm
from tests.support.fakes.hf_hub import FakeHfHub
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.resource_manager import FakeResourceManager
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import Scenario
from tests.support.fakes.tpu_api import FakeTpuApi, StateDurations
from tests.support.fakes.tpu_vm import TpuVmFleet
from tests.support.output_contract import config_of
from tests.support.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
#: What a clone holds that a run of the program reads.
PROJECT_FILES = (
    "__main__.py",
    "Pulumi.yaml",
    "requirements.txt",
    ".gitignore",
    "components",
    "scripts",
)
PROJECT = "test-project"
#: Sentinels: secrets whose value the tests know, so they can look for it everywhere.
HF_TOKEN = "hf_ENGINEsentinelTOKENnotARealOne42"
PASSPHRASE = engine_cli.PASSPHRASE
#: The fake TPU API's transient states: long enough to be seen, short enough for a test.
DURATIONS = StateDurations(0.5, 0.5, 0.5, 1.0, 0.5, 0.5)


class StackFakes(Protocol):
    """What a stack's fakes give its engine run: where the program finds them, what went wrong
    inside them (printed when a step fails), and their end."""

    def env(self) -> dict[str, str]: ...

    def problems(self) -> str: ...

    def stop(self) -> None: ...


F = TypeVar("F", bound=StackFakes)


@dataclass
class Run:
    """One command, finished."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> Run:
        assert self.returncode == 0, (
            f"`{' '.join(self.argv)}` failed ({self.returncode}):\n{self.output[-6000:]}"
        )
        return self


@dataclass
class Fakes:
    """The loopback Google APIs and the VMs behind the TPU API's nodes."""

    secret_manager: FakeSecretManager
    metadata: FakeMetadataServer
    resource_manager: FakeResourceManager
    hub: FakeHfHub
    fleet: TpuVmFleet
    tpu: FakeTpuApi
    #: The stand-in providers' cloud (tests/support/standins/store.py), and its Cloud Storage
    #: buckets (tests/support/fakes/gcs_store.py), which the VMs' fake `gcloud storage` reads and
    #: writes too.
    standin_state: Path
    buckets: Path
    #: The real registry the image pin resolves against (tests/support/registry.py), holding the
    #: stack's image, `vllm/vllm-tpu:nightly`; `vllm.registryEndpoint` points the program there.
    registry: Registry

    @classmethod
    def start(cls, work: Path, *, serving_port: int, scenario: Scenario | None) -> Fakes:
        started: list[Any] = []
        buckets = work / "buckets"
        buckets.mkdir()
        buckets.chmod(0o777)  # the VMs' users write the compile cache here
        try:
            secret_manager = FakeSecretManager()
            secret_manager.start()
            started.append(secret_manager)
            metadata = FakeMetadataServer(secret_manager.token).start()
            started.append(metadata)
            resource_manager = FakeResourceManager().start()
            started.append(resource_manager)
            hub = FakeHfHub().start()
            started.append(hub)
            hub.add_token(HF_TOKEN, granted=("google/gemma-4-E2B-it", "google/gemma-4-31B-it"))
            fleet = TpuVmFleet(
                env={
                    "GCE_METADATA_HOST": metadata.host,
                    "SECRET_MANAGER_API_ENDPOINT": secret_manager.url,
                    "FAKE_GCS_ROOT": str(buckets),
                },
                reach=[metadata.port, secret_manager.port],
                serving_ports=[serving_port],
                scenario=scenario,
            )
            started.append(fleet)
            tpu = FakeTpuApi(durations=DURATIONS, machines=fleet).start()
            started.append(tpu)
            fleet.watch(tpu.tick)
            registry = nightly_registry(work)
            started.append(registry)
        except BaseException:
            for fake in reversed(started):
                fake.stop()
            raise
        state = work / "standin-state"
        state.mkdir()
        return cls(
            secret_manager, metadata, resource_manager, hub, fleet, tpu, state, buckets, registry
        )

    def env(self) -> dict[str, str]:
        """Where the program, its providers and scripts find the fakes (all documented
        overrides: docs/testing.md, "Endpoint overrides")."""
        return {
            "GOOGLE_OAUTH_ACCESS_TOKEN": self.tpu.token,
            "TPU_API_ENDPOINT": self.tpu.base_url,
            # The Org Policy v2 reads follow it when ORG_POLICY_API_ENDPOINT is not set.
            "RESOURCE_MANAGER_API_ENDPOINT": self.resource_manager.url,
            **shared_env(self.secret_manager, self.hub, self.standin_state, self.buckets),
        }

    def problems(self) -> str:
        return f"fake VM errors: {self.fleet.errors}"

    def stop(self) -> None:
        for fake in (
            self.registry,
            self.tpu,
            self.fleet,
            self.hub,
            self.resource_manager,
            self.metadata,
        ):
            with contextlib.suppress(Exception):
                fake.stop()
        self.secret_manager.stop()


def shared_env(
    secret_manager: FakeSecretManager, hub: FakeHfHub, standin_state: Path, buckets: Path
) -> dict[str, str]:
    """What every stack's engine run points at the same way: Secret Manager (the scripts' client
    and the gcp stand-in's), the Hugging Face Hub, and the stand-in providers' state."""
    return {
        "SECRET_MANAGER_API_ENDPOINT": secret_manager.url,
        "GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT": f"{secret_manager.url}/v1/",
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "TPU_VLLM_STANDIN_STATE": str(standin_state),
        "TPU_VLLM_STANDIN_GCS_ROOT": str(buckets),
        "TPU_VLLM_STANDIN_PYTHON": sys.executable,
    }


def nightly_registry(work: Path) -> Registry:
    """The real registry the image pin resolves against, holding `vllm/vllm-tpu:nightly`."""
    registry = Registry(work / "registry")
    registry.push("vllm/vllm-tpu", "nightly", "the nightly of the day the stack is made")
    return registry


@dataclass
class EngineStack(Generic[F]):
    """A copy of the project, one stack, its fakes, and the CLI that runs there."""

    stack: str
    work: Path
    project: Path
    fakes: F
    env: dict[str, str]
    runs: list[Run] = field(default_factory=list)

    # -- commands ----------------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 900,
    ) -> Run:
        started = time.monotonic()
        done = subprocess.run(
            list(argv),
            cwd=cwd or self.project,
            env={**self.env, **(env or {})},
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        result = Run(list(argv), done.returncode, done.stdout, done.stderr,
                     time.monotonic() - started)  # fmt: skip
        self.runs.append(result)
        return result

    @property
    def pulumi_path(self) -> str:
        return engine_cli.pulumi()

    def pulumi(self, *args: str, **kwargs: Any) -> Run:
        """`pulumi ARGS` in the project, on this stack unless ARGS name one (or take none)."""
        bare = {"-s", "--stack"} & set(args) or args[0] in ("login", "stack")
        return self.run([self.pulumi_path, *args, *([] if bare else ["-s", self.stack])], **kwargs)

    def python(self, *args: str, **kwargs: Any) -> Run:
        """`.venv/bin/python ARGS` in the project, as the README runs the scripts."""
        return self.run([str(self.project / ".venv" / "bin" / "python"), *args], **kwargs)

    def up(self, *args: str, events: Path | None = None, **kwargs: Any) -> Run:
        extra = ["--event-log", str(events)] if events is not None else []
        return self.pulumi("up", "--yes", "--skip-preview", *extra, *args, **kwargs)

    def outputs(self, *, show_secrets: bool = False) -> dict[str, Any]:
        args = ["stack", "output", "--json", *(["--show-secrets"] if show_secrets else [])]
        run = self.pulumi(*args, "-s", self.stack).check()
        return dict(json.loads(run.stdout))

    def export(self) -> dict[str, Any]:
        """`pulumi stack export`: the deployment as the backend keeps it (secrets encrypted)."""
        return dict(json.loads(self.pulumi("stack", "export", "-s", self.stack).check().stdout))

    def resources(self) -> list[dict[str, Any]]:
        return list(self.export()["deployment"].get("resources") or [])

    def resource(self, name: str) -> dict[str, Any] | None:
        """The state's resource whose URN ends with `::NAME` (None if absent)."""
        found = [r for r in self.resources() if str(r["urn"]).endswith(f"::{name}")]
        return found[0] if found else None

    def state_files(self) -> list[Path]:
        """Everything the file backend wrote: checkpoints, their backups and the history."""
        return sorted(p for p in (self.work / "state").rglob("*") if p.is_file())

    def config_set(self, key: str, value: str, *flags: str) -> None:
        self.pulumi("config", "set", *flags, key, value).check()

    def stack_config(self) -> StackConfig:
        """The stack's config as the CLI holds it (`pulumi config --json`), through the
        program's own loader: what the output contract expects depends on it."""
        listed = json.loads(self.pulumi("config", "--json").check().stdout)
        raw = {key: entry.get("objectValue", entry.get("value")) for key, entry in listed.items()}
        return config_of(raw, stack=self.stack, project=str(raw["gcp:project"]))


def events(path: Path) -> list[dict[str, Any]]:
    """The engine's event log (`--event-log`), one JSON event per line, in sequence order."""
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(found, key=lambda e: int(e.get("sequence", 0)))


def steps(log: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(event kind, op, resource name) of each step event: `pre` when the step started,
    `done` when its outputs were recorded, `failed`."""
    out = []
    for event in log:
        for kind, key in (("pre", "resourcePreEvent"), ("done", "resOutputsEvent"),
                          ("failed", "resOpFailedEvent")):  # fmt: skip
            if key in event:
                meta = event[key]["metadata"]
                out.append((kind, str(meta["op"]), str(meta["urn"]).rsplit("::", 1)[-1]))
    return out


def copy_project(work: Path, stack: str) -> Path:
    """The files a clone has, into `work/project`; `.venv` is the running interpreter's."""
    project = work / "project"
    project.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pulumi-state")
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=ignore)
        else:
            shutil.copy2(source, project / name)
    shutil.copy2(ROOT / f"Pulumi.{stack}.yaml", project / f"Pulumi.{stack}.yaml")
    (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return project


@contextlib.contextmanager
def engine_stack(
    tmp: Path,
    stack: str = "v5e1",
    *,
    scenario: Scenario | None = None,
    serving_port: int = 8000,
) -> Iterator[EngineStack[Fakes]]:
    """The project copied, the fakes started, the README's first steps done: a file backend
    (`pulumi login file://...`), the stack (`pulumi stack select --create`), `gcp:project`,
    the ranges of who may connect, and the HF token stored with `scripts/save_hf_token.py`."""
    engine_cli.tools()
    reason = tpu_vm.available()
    if reason:
        privileged.skip_or_fail(reason)
    project = copy_project(tmp, stack)
    fakes = Fakes.start(tmp, serving_port=serving_port, scenario=scenario)
    try:
        env = {**engine_cli.environment(tmp), **fakes.env()}
        # `--event-log` exists only with the CLI's debug commands on (cmd/pulumi/operations).
        env["PULUMI_DEBUG_COMMANDS"] = "true"
        engine = EngineStack(stack, tmp, project, fakes, env)
        engine.pulumi("login", env["PULUMI_BACKEND_URL"]).check()
        engine.pulumi("stack", "select", "--create", stack).check()
        engine.config_set("gcp:project", PROJECT)
        # The fake VMs are at 127.0.2.N; the tests connect from loopback.
        engine.config_set("tpu-vllm:access.allowedCidrs[0]", "127.0.0.0/8", "--path")
        engine.config_set("tpu-vllm:access.sshCidrs[0]", "127.0.0.1/32", "--path")
        # The image pin asks the loopback registry, as a user's mirror would be asked.
        engine.config_set("tpu-vllm:vllm.registryEndpoint", fakes.registry.url, "--path")
        engine.python(
            "-m", "scripts.save_hf_token", "--stack", stack, stdin=HF_TOKEN + "\n"
        ).check()
        yield engine
    finally:
        fakes.stop()


class Lifecycle:
    """One stack's life in steps, one test each: a step runs only after the one it names
    passed, and a failing step prints the last commands' output."""

    def __init__(self, engine: EngineStack[Any]) -> None:
        self.engine = engine
        self.done: list[str] = []
        #: What one step learned that a later one checks (addresses, secret outputs).
        self.memo: dict[str, Any] = {}

    @contextlib.contextmanager
    def step(self, name: str, after: str | None = None) -> Iterator[None]:
        if after is not None and after not in self.done:
            pytest.fail(f"step {name!r} needs step {after!r}, which did not pass", pytrace=False)
        try:
            yield
        except BaseException:
            for run in self.engine.runs[-3:]:
                print(f"$ {' '.join(run.argv)}  -> {run.returncode} in {run.seconds:.1f} s")
                print(run.output[-6000:])
            print(self.engine.fakes.problems())
            raise
        self.done.append(name)
