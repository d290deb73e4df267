"""Stand-in for pulumi-command 1.2.1: `command:remote:Command`, run over real SSH.

The Go module proxy here does not serve pulumi-command's provider, so the suite runs this one in
its place (tests/support/standins/bin/pulumi-resource-command). It imitates, each function naming
its source:
- pulumi/pulumi-command v1.2.1 `provider/pkg/provider/remote/` (`command.go`,
  `commandController.go`, `commandOutputs.go`, `connection.go`, `proxyConnection.go`,
  `logging.go`), `common/inputs.go`, `util/util.go`: what the resource does;
- pulumi/pulumi-go-provider v1.3.0 `infer/` (`resource.go`, `apply_defaults.go`,
  `apply_secrets.go`), `provider.go` and `logging.go`: how its `infer` framework turns that into
  Check, Diff, Create, Read, Update and Delete;
- golang.org/x/crypto/ssh v0.48.0 through tests/support/standins/command_ssh.py: the SSH itself.

In short: Check fills `Annotate`'s defaults and marks `connection` and its keys secret; Diff
compares the new inputs with the old ones path by path, `triggers` replacing (its nested paths
only update here: the SDK's `replace_on_changes=["triggers[*]"]` makes the engine replace);
Create and Update run `create` / `update` (else `create`) unless in a preview; Delete runs
`delete` with the stored state; Read hands the state back. A failed command is an error alone:
pulumi-command 1.2.1 returns no partial state (`infer.ResourceInitFailedError` is never used),
so the engine records nothing for a failed create and keeps the old state for a failed update.

Left out: `command:local:Command`, `local:run`, `remote:CopyToRemote` and `remote:CopyFile`
(the program uses none; they are answered with a clear error), the provider's `Cancel`, and the
old inputs the engine sends with a Diff (the SDK's server does not pass them on, so the old
inputs are read from the state, as infer does without them: this resource's state holds its
inputs unchanged).
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import grpc.aio
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.provider.experimental.provider import (
    CheckFailure,
    CheckRequest,
    CheckResponse,
    ConfigureRequest,
    ConfigureResponse,
    CreateRequest,
    CreateResponse,
    DeleteRequest,
    DiffRequest,
    DiffResponse,
    GetSchemaRequest,
    GetSchemaResponse,
    PropertyDiff,
    PropertyDiffKind,
    Provider,
    ReadRequest,
    ReadResponse,
    UpdateRequest,
    UpdateResponse,
)
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc

from tests.support.standins.command_keys import SshError
from tests.support.standins.command_ssh import Connection, Job, run
from tests.support.standins.kinds import ApiError
from tests.support.standins.provider import engine_address, urn_name, urn_type
from tests.support.standins.provider import run as serve
from tests.support.standins.schema import Schema, load
from tests.support.standins.values import UNKNOWN, to_plain

VERSION = "1.2.1"
TOKEN = "command:remote:Command"
#: What pulumi-command 1.2.1 also serves (provider.go `NewProvider`) and this stand-in does not.
NOT_SERVED = (
    "command:local:Command",
    "command:local:run",
    "command:remote:CopyToRemote",
    "command:remote:CopyFile",
)
#: `Annotate`'s `SetDefault`s of `Connection` (connection.go) and `ProxyConnection`
#: (proxyConnection.go); numbers as the protocol carries them.
CONNECTION_DEFAULTS: Mapping[str, PropertyValue] = {
    "user": PropertyValue("root"),
    "port": PropertyValue(22.0),
    "dialErrorLimit": PropertyValue(10.0),
    "perDialTimeout": PropertyValue(15.0),
}
#: `provider:"secret"` fields of `connectionBase` (connection.go).
SECRET_KEYS = ("password", "privateKey", "privateKeyPassword")
#: The Go types the mapper names in its messages, by the trimmed schema's type token.
GO_TYPES = {
    "command:remote/Connection:Connection": "remote.Connection",
    "command:remote/ProxyConnection:ProxyConnection": "remote.ProxyConnection",
    "command:remote:Logging": "remote.Logging",
}
_ADD, _DELETE, _UPDATE = PropertyDiffKind.ADD, PropertyDiffKind.DELETE, PropertyDiffKind.UPDATE
_AS_REPLACE = {
    _ADD: PropertyDiffKind.ADD_REPLACE,
    _DELETE: PropertyDiffKind.DELETE_REPLACE,
    _UPDATE: PropertyDiffKind.UPDATE_REPLACE,
}

Values = Mapping[str, PropertyValue]
Path = tuple[str | int, ...]


class CommandProvider(Provider):
    """pulumi-command's `remote.Command` under infer's default Check, Diff and Read."""

    def __init__(self, engine: str) -> None:
        self.schema: Schema = load("command")
        self.spec: dict[str, Any] = self.schema.resource(TOKEN)
        self.inputs: list[str] = list(self.spec["inputProperties"])
        self._engine = engine
        self._stub: Any = None

    def served(self, urn: str) -> None:
        """provider.go's resources; middleware/dispatch's "Resource '%s' not found" otherwise,
        by `req.Urn.Type()` (`urn_type`)."""
        token = urn_type(urn)
        if token in NOT_SERVED:
            raise ApiError(f"the command stand-in serves only {TOKEN}, not {token}")
        if token != TOKEN:
            raise ApiError(f"Resource '{token}' not found")

    # -- configuration ----------------------------------------------------------------------
    async def get_schema(self, request: GetSchemaRequest) -> GetSchemaResponse:
        return GetSchemaResponse(schema=json.dumps(self.schema.data))

    async def configure(self, request: ConfigureRequest) -> ConfigureResponse:
        """pulumi-go-provider provider.go `Configure`: secrets, previews, resources, outputs."""
        return ConfigureResponse(
            accept_secrets=True, supports_preview=True, accept_resources=True, accept_outputs=True
        )

    # -- check and diff ---------------------------------------------------------------------
    async def check(self, request: CheckRequest) -> CheckResponse:
        """infer resource.go `Check` without a custom one: decode (the mapper's failures, and
        then the inputs as given, secrets applied), else `applyDefaults` and `applySecrets`."""
        self.served(request.urn)
        news = _without_nulls(request.new_inputs)
        failures = self.decode_failures({k: to_plain(v) for k, v in news.items()})
        if failures:
            return CheckResponse(inputs=_apply_secrets(news), failures=failures)
        return CheckResponse(inputs=_apply_secrets(_apply_defaults(news)))

    def decode_failures(self, news: Mapping[str, Any]) -> list[CheckFailure]:
        """ende.Decode's mapper errors (pulumi/pulumi sdk/go/common/util/mapper), in its words."""
        errors = self._struct_errors(
            news, self.spec["inputProperties"], self.spec["requiredInputs"], "CommandInputs"
        )
        return [CheckFailure(field, reason) for field, reason in errors]

    def _struct_errors(
        self, value: Mapping[str, Any], props: Mapping[str, Any], required: Sequence[str], go: str
    ) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        for name, spec in props.items():
            if value.get(name) is None:
                if name in required:
                    errors.append((name, f"Missing required field '{name}' on 'remote.{go}'"))
            else:
                errors += self._field_errors(name, value[name], spec, go)
        unknown = [key for key in value if key not in props]
        return errors + [(key, f"Unrecognized field '{key}' on 'remote.{go}'") for key in unknown]

    def _field_errors(
        self, name: str, value: Any, spec: Mapping[str, Any], go: str
    ) -> list[tuple[str, str]]:
        if value == UNKNOWN:
            return []
        token = str(spec.get("$ref", "")).removeprefix("#/types/")
        target = self.schema.data["types"].get(token, {})
        if target.get("type") == "object":
            if not isinstance(value, dict):
                return [_wrong_type(name, go, GO_TYPES[token], value)]
            inner_go = GO_TYPES[token].removeprefix("remote.")
            inner = self._struct_errors(
                value, target["properties"], target.get("required", []), inner_go
            )
            return [_nested(name, go, inner)] if inner else []
        kind = "string" if target else str(spec.get("type", ""))
        if kind == "object" and isinstance(value, dict):
            return [
                _wrong_type(f"{name}[{key}] value", go, "string", item)
                for key, item in value.items()
                if not isinstance(item, str) and item != UNKNOWN
            ][:1]
        if _go_type(value) in _ACCEPTS.get(kind, {_go_type(value)}):
            return []
        return [_wrong_type(name, go, _EXPECTS.get(kind, kind), value)]

    async def diff(self, request: DiffRequest) -> DiffResponse:
        """infer resource.go `diff`: `ignoreChanges` keys take the state's value, `version` and
        `__` keys are dropped; old inputs are the state's input keys (no `OldInputs` here); the
        detailed diff is `NewDetailedDiffFromObjectDiff` of the two, by property path, and a
        path that is a `replaceOnChanges` input (only `triggers` itself) replaces."""
        self.served(request.urn)
        state = request.old_state
        news = {k: v for k, v in request.new_inputs.items() if k != "version"}
        news = {k: v for k, v in news.items() if not k.startswith("__")}
        for key in request.ignore_changes:
            if key in state:
                news[key] = state[key]
        olds = {key: state[key] for key in self.inputs if key in state}
        changes = object_diff(olds, news, ())
        replacing = {
            k for k, s in self.spec["inputProperties"].items() if s.get("replaceOnChanges")
        }
        detailed = {
            _path_text(path): PropertyDiff(
                _AS_REPLACE[kind] if _path_text(path) in replacing else kind, input_diff=False
            )
            for path, kind in changes.items()
        }
        heads = {str(path[0]) for path in changes}
        replaces = {str(path[0]) for path in changes if _path_text(path) in replacing}
        return DiffResponse(
            changes=bool(changes),
            replaces=sorted(replaces),
            diffs=sorted(heads),
            detailed_diff=detailed,
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def create(self, request: CreateRequest) -> CreateResponse:
        """commandController.go `Create`: an ID `resource.NewUniqueHex(name, 8, 0)` (the name
        and 8 random hex digits), even in a preview; the inputs as outputs, with `stdout` and
        `stderr` unknown in a preview (infer `markComputed`: on create an output that does not
        mirror an input) and empty when there is no `create` to run."""
        self.served(request.urn)
        inputs = self._inputs(request.properties)
        resource_id = urn_name(request.urn) + secrets.token_hex(4)  # infer: `req.Urn.Name()`
        outputs = _outputs(inputs, "", "")
        if request.preview:
            outputs.update(stdout=PropertyValue(UNKNOWN), stderr=PropertyValue(UNKNOWN))
            return CreateResponse(resource_id=resource_id, properties=outputs)
        command = to_plain(inputs.get("create", PropertyValue(None)))
        if command is not None:
            stdout, stderr = await self._run(request.urn, command, inputs, ("", ""))
            outputs = _outputs(inputs, stdout, stderr)
        return CreateResponse(resource_id=resource_id, properties=outputs)

    async def update(self, request: UpdateRequest) -> UpdateResponse:
        """commandController.go `Update`: the new inputs with the old `stdout`/`stderr`; runs
        `update`, else `create`, with the previous outputs in the environment. In a preview
        nothing runs and `stdout`/`stderr` are unknown when any input differs from the state or
        is unknown (infer `markComputed` on update, every output depending on every input)."""
        self.served(request.urn)
        olds = request.olds
        news = self._inputs(request.news)
        for key in request.ignore_changes:
            if key in olds:
                news[key] = olds[key]
        previous = (_text(olds.get("stdout")), _text(olds.get("stderr")))
        outputs = _outputs(news, *previous)
        if request.preview:
            if any(_input_changed(news.get(k), olds.get(k), k in olds) for k in self.inputs):
                outputs.update(stdout=PropertyValue(UNKNOWN), stderr=PropertyValue(UNKNOWN))
            return UpdateResponse(properties=outputs)
        chosen = news.get("update") if "update" in news else news.get("create")
        command = None if chosen is None else to_plain(chosen)
        if command is not None:
            outputs = _outputs(news, *await self._run(request.urn, command, news, previous))
        return UpdateResponse(properties=outputs)

    async def delete(self, request: DeleteRequest) -> None:
        """commandController.go `Delete`: `delete` from the stored state (its connection, its
        environment and stdin, its outputs as the previous ones), nothing when unset."""
        self.served(request.urn)
        state = request.properties
        command = to_plain(state.get("delete", PropertyValue(None)))
        if command is not None:
            previous = (_text(state.get("stdout")), _text(state.get("stderr")))
            await self._run(request.urn, command, state, previous)

    async def read(self, request: ReadRequest) -> ReadResponse:
        """infer resource.go `Read` without a custom one: the state and inputs as they are."""
        self.served(request.urn)
        return ReadResponse(
            resource_id=request.resource_id, properties=request.properties, inputs=request.inputs
        )

    # -- helpers ----------------------------------------------------------------------------
    def _inputs(self, values: Values) -> dict[str, PropertyValue]:
        """The inputs as infer decodes them into `CommandInputs`: its fields, nulls skipped."""
        return {k: v for k, v in _without_nulls(values).items() if k in self.inputs}

    async def _run(
        self, urn: str, command: str, inputs: Values, previous: tuple[str, str]
    ) -> tuple[str, str]:
        """`CommandOutputs.run` with the resource's inputs; its error is the operation's."""
        plain = {k: to_plain(v) for k, v in inputs.items()}
        job = Job(
            command=command,
            connection=Connection.from_inputs(plain["connection"]),
            environment=plain.get("environment") or {},
            add_previous_output_in_env=plain.get("addPreviousOutputInEnv") is not False,
            previous_stdout=previous[0],
            previous_stderr=previous[1],
            stdin=plain.get("stdin") or "",
            logging=plain.get("logging"),
        )
        try:
            return await run(job, EngineLog(self._engine_stub(), urn))
        except SshError as error:
            raise ApiError(str(error)) from error

    def _engine_stub(self) -> Any:
        """The engine's `Engine` service, on the address the plugin was started with (made in
        the server's event loop, on first use)."""
        if self._stub is None and self._engine:
            channel = grpc.aio.insecure_channel(self._engine)
            self._stub = engine_pb2_grpc.EngineStub(channel)
        return self._stub


class EngineLog:
    """pulumi-go-provider logging.go `hostSink` for one resource: the engine's `Log` RPC with
    its URN (pulumi/pulumi `HostClient.Log`; `LogStatus` is the same with `ephemeral` set, a
    status line the progress display shows and drops); a failed call goes to stderr, as the
    sink falls back to slog."""

    def __init__(self, stub: Any, urn: str) -> None:
        self._stub = stub
        self._urn = urn

    async def info_status(self, message: str) -> None:
        await self._send(engine_pb2.INFO, message, ephemeral=True)

    async def warning(self, message: str) -> None:
        await self._send(engine_pb2.WARNING, message, ephemeral=False)

    async def error(self, message: str) -> None:
        await self._send(engine_pb2.ERROR, message, ephemeral=False)

    async def _send(self, severity: Any, message: str, *, ephemeral: bool) -> None:
        request = engine_pb2.LogRequest(
            severity=severity, message=message, urn=self._urn, ephemeral=ephemeral
        )
        if self._stub is not None:
            try:
                await self._stub.Log(request, timeout=10)
                return
            except grpc.aio.AioRpcError:
                pass
        print(f"{self._urn}: {message}", file=sys.stderr, flush=True)


# -- Check -------------------------------------------------------------------------------------
def _without_nulls(values: Values) -> dict[str, PropertyValue]:
    """The engine's nulls skipped, inside objects too (pulumi-go-provider `getMap`,
    `SkipNulls`)."""

    def walk(value: PropertyValue) -> PropertyValue:
        if isinstance(value.value, Mapping):
            kept = {k: walk(v) for k, v in value.value.items() if v.value is not None}
            return value.with_value(kept)
        return value

    return {k: walk(v) for k, v in values.items() if v.value is not None}


def _apply_defaults(values: Values) -> dict[str, PropertyValue]:
    """apply_defaults.go: `connection`'s and its `proxy`'s unset `SetDefault` fields filled; an
    unset (or unknown) `proxy` stays unset, as an optional nil struct is not hydrated."""
    out = dict(values)
    connection = out.get("connection")
    if connection is not None and isinstance(connection.value, Mapping):
        fields = dict(connection.value)
        proxy = fields.get("proxy")
        if proxy is not None and isinstance(proxy.value, Mapping):
            fields["proxy"] = proxy.with_value({**CONNECTION_DEFAULTS, **proxy.value})
        out["connection"] = connection.with_value({**CONNECTION_DEFAULTS, **fields})
    return out


def _apply_secrets(values: Values) -> dict[str, PropertyValue]:
    """apply_secrets.go: `connection` secret (`provider:"secret"`), and inside it, and inside
    its `proxy`, `password`, `privateKey` and `privateKeyPassword`."""

    def keys_secret(value: PropertyValue) -> PropertyValue:
        if not isinstance(value.value, Mapping):
            return value
        fields = {k: v.with_secret(True) if k in SECRET_KEYS else v for k, v in value.value.items()}
        if "proxy" in fields:
            fields["proxy"] = keys_secret(fields["proxy"])
        return value.with_value(fields)

    out = dict(values)
    if "connection" in out:
        out["connection"] = keys_secret(out["connection"]).with_secret(True)
    return out


_ACCEPTS = {
    "string": {"string"},
    "integer": {"float64"},
    "number": {"float64"},
    "boolean": {"bool"},
    "object": {"map[string]interface {}"},
    "array": {"[]interface {}"},
}
_EXPECTS = {"integer": "int", "number": "float64", "object": "map[string]string"}
_EXPECTS |= {"array": "[]interface {}", "boolean": "bool", "string": "string"}


def _go_type(value: Any) -> str:
    """The Go type of a decoded property value (`resource.PropertyMap.Mappable`)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "float64"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return "string"


def _wrong_type(name: str, go: str, expected: str, value: Any) -> tuple[str, str]:
    """mapper `NewWrongTypeError`."""
    actual = _go_type(value)
    return name, f"Field '{name}' on 'remote.{go}' must be a '{expected}'; got '{actual}' instead"


def _nested(name: str, go: str, inner: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """mapper `NewTypeFieldError` around a nested struct's `MappingError`."""
    listed = "".join(f"\n\t{field}: {reason}" for field, reason in inner)
    return (
        name,
        f"An error occurred decoding '{go}.{name}': {len(inner)} failures decoding:{listed}",
    )


# -- Diff --------------------------------------------------------------------------------------
def object_diff(olds: Values, news: Values, prefix: Path) -> dict[Path, PropertyDiffKind]:
    """pulumi/pulumi `PropertyMap.diff` then `objectDiffToDetailedDiff`: a key set only on one
    side (and not null) is an add or a delete; a changed one is an add from null, a delete to
    null, else its nested changes."""
    out: dict[Path, PropertyDiffKind] = {}
    for key, old in olds.items():
        path = (*prefix, key)
        new = news.get(key)
        if new is None:
            if old.value is not None:
                out[path] = _DELETE
        elif not new.dependencies:  # an output value counts as unchanged (`IsOutput`)
            nested = value_diff(old, new, path)
            if nested and old.value is None:
                out[path] = _ADD
            elif nested and new.value is None:
                out[path] = _DELETE
            else:
                out.update(nested)
    for key, new in news.items():
        if key not in olds and new.value is not None:
            out[(*prefix, key)] = _ADD
    return out


def value_diff(old: PropertyValue, new: PropertyValue, path: Path) -> dict[Path, PropertyDiffKind]:
    """`PropertyValue.diff` then `valueDiffToDetailedDiff`: arrays element by element, objects
    key by key, anything else (a secret too: it is neither) compared whole."""
    plain = not (old.is_secret or new.is_secret)
    old_items, new_items = _items(old), _items(new)
    if plain and old_items is not None and new_items is not None:
        return _array_diff(old_items, new_items, path)
    if plain and isinstance(old.value, Mapping) and isinstance(new.value, Mapping):
        return object_diff(old.value, new.value, path)
    if same(old, new):
        return {}
    if old.value is None:
        return {path: _ADD}
    return {path: _DELETE if new.value is None else _UPDATE}


def _array_diff(
    old: Sequence[PropertyValue], new: Sequence[PropertyValue], path: Path
) -> dict[Path, PropertyDiffKind]:
    out: dict[Path, PropertyDiffKind] = {}
    for index in range(min(len(old), len(new))):
        out.update(value_diff(old[index], new[index], (*path, index)))
    out.update({(*path, i): _ADD for i in range(len(old), len(new))})
    out.update({(*path, i): _DELETE for i in range(len(new), len(old))})
    return out


def _items(value: PropertyValue) -> Sequence[PropertyValue] | None:
    """An array's elements; None for anything else."""
    if isinstance(value.value, Sequence) and not isinstance(value.value, str):
        return value.value
    return None


def same(a: PropertyValue, b: PropertyValue) -> bool:
    """`DeepEquals`: values and secretness alike, at every depth (dependencies aside)."""
    if a.is_secret != b.is_secret:
        return False
    a_items, b_items = _items(a), _items(b)
    if a_items is not None and b_items is not None:
        return len(a_items) == len(b_items) and all(map(same, a_items, b_items))
    if isinstance(a.value, Mapping) and isinstance(b.value, Mapping):
        keys = {k for k, v in a.value.items() if v.value is not None}
        if keys != {k for k, v in b.value.items() if v.value is not None}:
            return False
        return all(same(a.value[k], b.value[k]) for k in keys)
    return bool(a.value == b.value)


def _path_text(path: Path) -> str:
    """`PropertyPath.String`: `a.b[0]`, a key with other than [A-Za-z0-9_] as `["k-ey"]`."""
    out = ""
    for index, key in enumerate(path):
        if isinstance(key, int):
            out += f"[{key}]"
        elif all(c.isascii() and (c.isalnum() or c == "_") for c in key):
            out += key if index == 0 else f".{key}"
        else:
            escaped = key.replace('"', '\\"')
            out += f'["{escaped}"]'
    return out


# -- Create and Update -------------------------------------------------------------------------
def _outputs(inputs: Values, stdout: str, stderr: str) -> dict[str, PropertyValue]:
    """`CommandOutputs`: the inputs (as decoded, secrets kept by infer's encoder) and
    `BaseOutputs`."""
    return {**inputs, "stdout": PropertyValue(stdout), "stderr": PropertyValue(stderr)}


def _input_changed(new: PropertyValue | None, old: PropertyValue | None, had_old: bool) -> bool:
    """infer `markComputed`'s test of one dependency: unknown now, or other than the state's."""
    value = new if new is not None else PropertyValue(None)
    if value.value == UNKNOWN:
        return True
    return had_old and not same(value, old if old is not None else PropertyValue(None))


def _text(value: PropertyValue | None) -> str:
    plain = None if value is None else to_plain(value)
    return plain if isinstance(plain, str) else ""


def main() -> None:
    serve(CommandProvider(engine_address()), VERSION)


if __name__ == "__main__":
    main()
