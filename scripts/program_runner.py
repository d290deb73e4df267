"""Run `__main__.py` under Pulumi mocks, exactly as `pulumi up -s STACK` would feed it config.

It reads the committed `Pulumi.<stack>.yaml` as the CLI passes it (strings, objects as JSON),
so a run exercises the real stack files. Each run has a fresh `contextvars.Context`: the SDK
keeps its settings, config and root stack in context variables.
"""

from __future__ import annotations

import contextvars
import copy
import json
import logging
import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks, rpc
from pulumi.runtime.stack import massage, run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    provider: str


@dataclass(frozen=True)
class Registration:
    """One RegisterResource request: what makes a resource's URN. The mock monitor's URNs name
    only the parent's own type; `tests/support/urns.py` rebuilds the engine's."""

    type: str
    name: str
    #: The root stack's URN for a resource without an explicit parent.
    parent: str
    #: `URN::ID`, "" for the default provider.
    provider: str
    urn: str


@dataclass
class ProgramRun:
    resources: list[Registered]
    outputs: dict[str, Any]
    secret_outputs: set[str]
    log: list[tuple[int, str]] = field(default_factory=list)
    #: With `expect_error=True`.
    error: BaseException | None = None
    urns: list[str] = field(default_factory=list)
    #: (token, args) of each invoke.
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Name -> names it depends on, as the engine is told: what orders creates.
    dependencies: dict[str, set[str]] = field(default_factory=dict)
    registrations: list[Registration] = field(default_factory=list)

    def urn_of(self, name: str) -> str:
        [urn] = [u for u in self.urns if u.endswith(f"::{name}")]
        return urn

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Registered:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> Registered:
        """A kind may have several resources; a name has one."""
        [found] = [r for r in self.resources if r.name == name]
        return found

    @property
    def warnings(self) -> list[str]:
        return [msg for level, msg in self.log if level == logging.WARNING]


NewResource = Callable[[mocks.MockResourceArgs], dict[str, Any]]
Call = Callable[[mocks.MockCallArgs], dict[str, Any]]


class InvokeFailure(Exception):
    """Raised by a test's `call` to make the mocked invoke fail as the provider would."""

    def __init__(self, reason: str, property_name: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.property_name = property_name


GET_MANAGED_ZONE = "gcp:dns/getManagedZone:getManagedZone"
GET_UPTIME_CHECK_IPS = "gcp:monitoring/getUptimeCheckIPs:getUptimeCheckIPs"
#: Documentation addresses (RFC 5737, RFC 3849) in pulumi-gcp's `GetUptimeCheckIPsResult`
#: shape, an IPv6 one among them as in the real list.
UPTIME_CHECK_IPS = [
    {"ipAddress": "192.0.2.10", "location": "Iowa", "region": "USA"},
    {"ipAddress": "198.51.100.20", "location": "Belgium", "region": "EUROPE"},
    {"ipAddress": "203.0.113.30", "location": "Singapore", "region": "ASIA_PACIFIC"},
    {"ipAddress": "2001:db8::40", "location": "Oregon", "region": "USA"},
]


def managed_zone_lookup(zones: Mapping[str, str]) -> Call:
    """Answer `gcp.dns.get_managed_zone` from `{zone name: DNS name}`, failing as the provider
    does (terraform-provider-google `data_source_dns_managed_zone.go`)."""

    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        name = str(args.args.get("name"))
        project = str(args.args.get("project"))
        if name not in zones:
            raise InvokeFailure(f"projects/{project}/managedZones/{name} not found")
        return {
            "id": f"projects/{project}/managedZones/{name}",
            "name": name,
            "project": project,
            "dnsName": zones[name],
            "visibility": "public",
            "nameServers": ["ns-cloud-a1.googledomains.com."],
            "description": "",
        }

    return call


class RecordingMocks(pulumi.runtime.Mocks):
    """Outputs are the inputs plus what `outputs_for` adds; invokes echo their arguments unless
    `call` or `managed_zones` answers them."""

    def __init__(
        self,
        outputs_for: NewResource | None,
        call: Call | None,
        managed_zones: Mapping[str, str] | None = None,
    ) -> None:
        self.resources: list[Registered] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._outputs_for = outputs_for
        self._call = call
        self._zone_lookup = None if managed_zones is None else managed_zone_lookup(managed_zones)

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(
            Registered(
                args.typ, args.name, dict(args.inputs), bool(args.custom), args.provider or ""
            )
        )
        state = dict(args.inputs)
        if self._outputs_for is not None:
            state.update(self._outputs_for(args))
        return str(state.pop("__id", f"{args.name}-id")), state

    def call(self, args: mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        self.calls.append((args.token, dict(args.args)))
        call = self._call
        if self._zone_lookup is not None and args.token == GET_MANAGED_ZONE:
            call = self._zone_lookup
        if args.token == GET_UPTIME_CHECK_IPS:
            return {"id": "uptime-check-ips", "uptimeCheckIps": UPTIME_CHECK_IPS}, []
        try:
            return (call(args) if call else dict(args.args)), []
        except InvokeFailure as failure:
            return {}, [(failure.property_name, failure.reason)]


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))


def stack_file_config(stack: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


def with_changes(config: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`{"tpu-vllm:vllm.maxModelLen": 1, ...}` path changes; a value of None deletes."""
    result = copy.deepcopy(dict(config))
    for path, value in changes.items():
        key, _, rest = path.partition(".")
        if not rest:
            if value is None:
                result.pop(key, None)
            else:
                result[key] = value
            continue
        node = result.setdefault(key, {})
        parts = rest.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return result


def cli_config(config: Mapping[str, Any]) -> dict[str, str]:
    """As the Pulumi CLI passes config to a program: strings, objects as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def run_program(
    stack: str,
    changes: Mapping[str, Any] | None = None,
    *,
    project: str | None,
    preview: bool = False,
    outputs_for: NewResource | None = None,
    call: Call | None = None,
    expect_error: bool = False,
    managed_zones: Mapping[str, str] | None = None,
) -> ProgramRun:
    """With `expect_error` the program must fail, and the run holds what it registered before,
    so a test can prove nothing was created."""
    config = stack_file_config(stack)
    if project is not None:
        config["gcp:project"] = project
    config = with_changes(config, changes or {})
    run = run_file(
        ROOT / "__main__.py",
        stack,
        config,
        preview=preview,
        outputs_for=outputs_for,
        call=call,
        managed_zones=managed_zones,
    )
    if run.error is not None and not expect_error:
        raise run.error
    if run.error is None and expect_error:
        raise AssertionError(f"the {stack} program was expected to fail but succeeded")
    return run


async def engine_output_names(exported: Mapping[str, Any]) -> set[str]:
    """The stack outputs the engine really stores: `rpc.serialize_properties` drops an export
    that serializes to None (pulumi/runtime/stack.py `Stack._finish`). Under mocks the root
    stack registered its outputs before the program ran, so this replays that step."""
    struct = await rpc.serialize_properties(massage(dict(exported), []), {})
    return set(struct.keys())


def run_file(
    program: Path,
    stack: str,
    config: Mapping[str, Any],
    *,
    project_name: str = "tpu-vllm",
    preview: bool = False,
    outputs_for: NewResource | None = None,
    call: Call | None = None,
    managed_zones: Mapping[str, str] | None = None,
) -> ProgramRun:
    """Errors are returned in `.error`."""

    def run_program() -> None:
        runpy.run_path(str(program), run_name="__main__")

    return run_function(
        run_program,
        stack,
        config,
        project_name=project_name,
        preview=preview,
        outputs_for=outputs_for,
        call=call,
        managed_zones=managed_zones,
    )


def run_function(
    program: Callable[[], None],
    stack: str,
    config: Mapping[str, Any],
    *,
    project_name: str = "tpu-vllm",
    preview: bool = False,
    outputs_for: NewResource | None = None,
    call: Call | None = None,
    managed_zones: Mapping[str, str] | None = None,
) -> ProgramRun:
    """`run_file` for a program written as a function: a component built alone, in a test."""
    return contextvars.Context().run(
        _run,
        program,
        stack,
        dict(config),
        project_name=project_name,
        preview=preview,
        outputs_for=outputs_for,
        call=call,
        managed_zones=managed_zones,
    )


def _forget_failed_program() -> None:
    """The SDK's `wait_for_rpcs` raises at the first failed RPC and leaves the other tasks
    behind; a real `pulumi up` exits there, but these runs share a process, so the next run
    would report this one's error as its own."""
    state = pulumi.runtime.settings.SETTINGS
    with state.lock:
        state.outputs.clear()
    state.rpc_manager.clear()


def _run(
    program: Callable[[], None],
    stack: str,
    config: dict[str, Any],
    *,
    project_name: str,
    preview: bool,
    outputs_for: NewResource | None,
    call: Call | None,
    managed_zones: Mapping[str, str] | None,
) -> ProgramRun:
    recorder = RecordingMocks(outputs_for, call, managed_zones)
    handler = _ListHandler()
    logger = logging.getLogger(f"tpu-vllm-test-{id(handler)}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    pulumi.runtime.set_mocks(
        recorder, project=project_name, stack=stack, preview=preview, logger=logger
    )
    pulumi.runtime.set_all_config(cli_config(config))
    dependencies = _record_dependencies()
    registrations = _record_registrations()

    try:
        _sync_await(run_pulumi_func(program))
    except Exception as error:  # noqa: BLE001 - handed back to the caller to assert on
        _forget_failed_program()
        return ProgramRun(
            recorder.resources, {}, set(), handler.records, error, calls=recorder.calls
        )
    root = pulumi.runtime.settings.get_root_resource()
    assert root is not None
    exported: dict[str, Any] = dict(getattr(root, "outputs", {}))
    kept = _sync_await(engine_output_names(exported))
    outputs: dict[str, Any] = {}
    secrets: set[str] = set()
    for name, value in exported.items():
        if name not in kept:
            continue
        output = pulumi.Output.from_input(value)
        outputs[name] = _sync_await(output.future())
        if _sync_await(output.is_secret()):
            secrets.add(name)
    monitor = pulumi.runtime.settings.get_monitor()
    urns = list(getattr(monitor, "resources", {}))
    return ProgramRun(
        recorder.resources,
        outputs,
        secrets,
        handler.records,
        urns=urns,
        calls=recorder.calls,
        dependencies=dependencies,
        registrations=registrations,
    )


def _record_dependencies() -> dict[str, set[str]]:
    """Each RegisterResource request's dependency URNs, from the mock monitor."""
    monitor = pulumi.runtime.settings.get_monitor()
    assert monitor is not None, "set_mocks installs a monitor"
    register = monitor.RegisterResource
    found: dict[str, set[str]] = {}

    def recording(request: Any) -> Any:
        names = {str(urn).rsplit("::", 1)[-1] for urn in request.dependencies}
        for deps in request.propertyDependencies.values():
            names |= {str(urn).rsplit("::", 1)[-1] for urn in deps.urns}
        found.setdefault(request.name, set()).update(names)
        return register(request)

    monitor.RegisterResource = recording
    return found


def _record_registrations() -> list[Registration]:
    """The root stack's registration included."""
    monitor = pulumi.runtime.settings.get_monitor()
    assert monitor is not None, "set_mocks installs a monitor"
    register = monitor.RegisterResource
    found: list[Registration] = []

    def recording(request: Any) -> Any:
        response = register(request)
        found.append(
            Registration(
                str(request.type),
                str(request.name),
                str(request.parent),
                str(request.provider),
                str(response.urn),
            )
        )
        return response

    monitor.RegisterResource = recording
    return found
