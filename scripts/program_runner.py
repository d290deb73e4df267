"""Run `__main__.py` under Pulumi mocks, exactly as `pulumi up -s STACK` would feed it config.

Used by the tests and by `scripts/plan.py` (the credential-free plan). The Pulumi CLI hands a
Python program its stack config as strings, objects as JSON text; this reads the committed
`Pulumi.<stack>.yaml` the same way, so a run exercises the real stack files, not a copy. Each
run happens in a fresh `contextvars.Context`, because the SDK keeps its settings, config and
root stack in context variables: runs cannot leak into each other.
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
    """One resource the program registered."""

    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    provider: str


@dataclass(frozen=True)
class Registration:
    """One RegisterResource request as the engine receives it: what makes a resource's URN.

    `parent` and `provider` are what the mock monitor answered for them (its URNs name only
    the parent's own type, not the whole chain a real engine's do; `tests/support/urns.py` rebuilds
    the engine's)."""

    type: str
    name: str
    #: The parent's URN; the root stack's for a resource without an explicit parent.
    parent: str
    #: The explicit provider reference (`URN::ID`), "" for the default provider.
    provider: str
    #: The URN the mock monitor gave the resource.
    urn: str


@dataclass
class ProgramRun:
    resources: list[Registered]
    outputs: dict[str, Any]
    secret_outputs: set[str]
    log: list[tuple[int, str]] = field(default_factory=list)
    #: The exception the program stopped with, when run with `expect_error=True`.
    error: BaseException | None = None
    #: URNs of every registered resource: they encode the parent chain.
    urns: list[str] = field(default_factory=list)
    #: Invokes the program made: (token, args).
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Resource name -> names of the resources it depends on (inputs and `depends_on`), as
    #: the engine is told: what orders creates in a real `pulumi up`.
    dependencies: dict[str, set[str]] = field(default_factory=dict)
    #: Every RegisterResource request, in order, with the URN the mock monitor answered.
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
        """The one resource registered under `name` (a kind may have several)."""
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
#: What the offline run answers for Google's uptime-check addresses: documentation addresses
#: (RFC 5737, RFC 3849), in the shape of the provider's data source (pulumi-gcp
#: `GetUptimeCheckIPsResult.uptime_check_ips`: ipAddress, location, region), an IPv6 one among
#: them as the real list has. A real `pulumi preview` reads Google's list.
UPTIME_CHECK_IPS = [
    {"ipAddress": "192.0.2.10", "location": "Iowa", "region": "USA"},
    {"ipAddress": "198.51.100.20", "location": "Belgium", "region": "EUROPE"},
    {"ipAddress": "203.0.113.30", "location": "Singapore", "region": "ASIA_PACIFIC"},
    {"ipAddress": "2001:db8::40", "location": "Oregon", "region": "USA"},
]


def managed_zone_lookup(zones: Mapping[str, str]) -> Call:
    """Answer `gcp.dns.get_managed_zone` from `{zone name: DNS name}`, as the provider would.

    The provider's data source (hashicorp/terraform-provider-google,
    `google/services/dns/data_source_dns_managed_zone.go`) reads the zone with
    `ManagedZones.Get` and fails with `projects/P/managedZones/NAME not found` when it is absent.
    """

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
    """Records every resource; outputs default to the inputs plus what `outputs_for` adds.

    Invokes go to `call` (by default they echo their arguments); with `managed_zones`, the
    managed-zone lookup is answered from it first, so a test can say which zones exist.
    """

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
        # `outputs_for` may name the resource's id (e.g. a secret's `projects/P/secrets/S`).
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
    """The `config:` map of `Pulumi.<stack>.yaml`, as parsed YAML."""
    data = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


def with_changes(config: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply `{"tpu-vllm:vllm.maxModelLen": 1, ...}` path changes; a value of None deletes."""
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
    """Encode config the way the Pulumi CLI passes it to a program: strings, objects as JSON."""
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
    """Run `__main__.py` for a stack under mocks and return what it registered and exported.

    `managed_zones` (`{zone name: DNS name}`) are the Cloud DNS zones that exist; None leaves
    the lookup to `call`.

    With `expect_error`, the program must fail: the run is returned with `.error` set and the
    resources registered before the failure, so a test can prove nothing was created.
    """
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
    """The stack outputs the Pulumi engine really stores.

    A real run ends with the root stack's `register_outputs` (pulumi/runtime/stack.py
    `Stack._finish`: `massage` then `register_resource_outputs`), which serializes them with
    `rpc.serialize_properties`; that function skips every property that serializes to None
    ("We treat properties that serialize to None as if they don't exist"). So an export whose
    value is None is absent from the stack, and `require_output` fails on it. Under mocks the
    root stack registered its (then empty) outputs before the program ran, so this replays the
    same serialization on the final exports. Unknown values (a preview) serialize to the
    UNKNOWN sentinel and are kept, as the engine keeps them.
    """
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
    """Run any Pulumi Python program file under mocks (errors are returned in `.error`)."""
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
    """Forget what a failed program left for the SDK to wait on.

    The SDK's `wait_for_rpcs` raises at the first failed RPC (an exception inside an `apply`,
    say) and leaves the program's other output tasks in the runtime's bookkeeping. A real
    `pulumi up` ends its process there; these runs share it, so the next run would await those
    tasks and report the previous program's error as its own.
    """
    state = pulumi.runtime.settings.SETTINGS
    with state.lock:
        state.outputs.clear()
    state.rpc_manager.clear()


def _run(
    program_file: Path,
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

    def program() -> None:
        runpy.run_path(str(program_file), run_name="__main__")

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
            continue  # the engine never sees it: `pulumi stack output NAME` would fail
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
    """Wrap the mock monitor's RegisterResource to keep each request's dependency URNs."""
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
    """Wrap the mock monitor's RegisterResource to keep each request's type, name, parent and
    provider, with the URN it answered (the root stack's registration included)."""
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
