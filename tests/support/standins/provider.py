"""The protocol side of a stand-in provider: check, diff, create, read, update, delete, invoke.

Served by `pulumi.provider.experimental.server.main` (the pulumi SDK's provider server), which the
engine starts as `pulumi-resource-NAME <engine address>` and reads the port from stdout. What
this class does the way pulumi-terraform-bridge does it for a bridged provider
(pulumi/pulumi-terraform-bridge `pkg/tfbridge/provider.go`):

- `Check` validates against the provider's schema and Terraform's validators, fills in
  Terraform's `Default:`s and autonames a missing name (`<urn name>-<7 hex>` drawn from the
  engine's random seed, kept from the old inputs on later runs);
- `Diff` compares the new inputs with the old *state* (outputs), as Terraform plans: an
  Optional+Computed input left out keeps its state value, a set ignores order, a ForceNew field
  replaces, and `deleteBeforeReplace` where pulumi-gcp asks for it;
- in a preview, `Create`/`Update` answer without touching the "cloud": unknown computed outputs
  on create, the state's values kept on update (`supportsPreview`);
- outputs that Terraform marks Sensitive, or whose input was secret, go back secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Sequence

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
    InvokeRequest,
    InvokeResponse,
    PropertyDiff,
    PropertyDiffKind,
    Provider,
    ReadRequest,
    ReadResponse,
    UpdateRequest,
    UpdateResponse,
)
from pulumi.provider.experimental.server import ProviderServicer
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import provider_pb2_grpc

from tests.support.standins.kinds import ApiError, Context, Function, Kind
from tests.support.standins.schema import Schema, load
from tests.support.standins.values import UNKNOWN, Plain, integral, is_unknown, marshal, unmarshal


def _empty(value: object) -> bool:
    """Terraform's zero values: an unset input and a false, 0, "" or empty one are the same."""
    return value is None or value is False or value in ([], {}, "", 0)


class StandinProvider(Provider):
    """A provider serving `kinds` and `functions` of package `name`, checked by its schema."""

    def __init__(self, name: str, kinds: Sequence[Kind], functions: Sequence[Function]) -> None:
        self.name = name
        self.schema: Schema = load(name)
        self.kinds = {kind.token: kind for kind in kinds}
        self.functions = {function.token: function for function in functions}
        self.ctx = Context()

    def kind(self, urn: str) -> Kind:
        token = urn_type(urn)
        if token not in self.kinds:
            raise KeyError(f"the {self.name} stand-in does not serve {token}")
        return self.kinds[token]

    def secret_keys(self, kind: Kind, secret_inputs: set[str]) -> set[str]:
        spec = self.schema.resource(kind.token)
        return set(spec.get("secretOutputs", [])) | set(kind.sensitive) | secret_inputs

    # -- configuration ----------------------------------------------------------------------
    async def get_schema(self, request: GetSchemaRequest) -> GetSchemaResponse:
        return GetSchemaResponse(schema=json.dumps(self.schema.data))

    async def configure(self, request: ConfigureRequest) -> ConfigureResponse:
        args, _ = unmarshal(request.args)
        self.ctx = Context.from_configure(self.name, request.variables, args)
        return ConfigureResponse(
            accept_secrets=True, supports_preview=True, accept_resources=True, accept_outputs=True
        )

    # -- check and diff ---------------------------------------------------------------------
    async def check(self, request: CheckRequest) -> CheckResponse:
        kind = self.kind(request.urn)
        news, secret = unmarshal(request.new_inputs)
        olds, _ = unmarshal(request.old_inputs)
        if kind.autoname is not None:
            prop, maxlen = kind.autoname
            if news.get(prop) is None:
                news[prop] = olds.get(prop) or self._autoname(request, maxlen)
        for prop, default in kind.defaults.items():
            if news.get(prop) is None:
                news[prop] = default
        kind.fill_nested_defaults(news)
        failures = self.schema.check_inputs(kind.token, news) + kind.validate(news, self.ctx)
        return CheckResponse(
            inputs=marshal(news, secret),
            failures=[CheckFailure(f.property, f.reason) for f in failures],
        )

    @staticmethod
    def _autoname(request: CheckRequest, maxlen: int) -> str:
        """pulumi-terraform-bridge's default autonaming: `<name>-<7 random hex>`, truncated,
        random from the engine's per-resource seed (so a re-check gives the same name)."""
        seed = request.random_seed or os.urandom(16)
        suffix = hashlib.sha256(seed + request.name.encode()).hexdigest()[:7]
        prefix = request.name[: max(0, maxlen - 8)]
        return f"{prefix}-{suffix}"

    async def diff(self, request: DiffRequest) -> DiffResponse:
        kind = self.kind(request.urn)
        olds, _ = unmarshal(request.old_state)
        news, _ = unmarshal(request.new_inputs)
        inputs = self.schema.resource(kind.token)["inputProperties"]
        detailed: dict[str, PropertyDiff] = {}
        replaces: list[str] = []
        for prop in inputs:
            if prop in request.ignore_changes:
                continue
            old, new = olds.get(prop), news.get(prop)
            if new is None and prop in kind.from_provider:
                new = self.ctx.config.get(kind.from_provider[prop])
            if new is None:
                if prop in kind.computed or _empty(old):
                    continue
                change = PropertyDiffKind.DELETE
            elif _empty(old) and not is_unknown(new):
                if _empty(new):
                    continue
                change = PropertyDiffKind.ADD
            elif is_unknown(new) or not kind.same(prop, old, new):
                change = PropertyDiffKind.UPDATE
            else:
                continue
            if kind.replaces(prop, old, new):
                replaces.append(prop)
                change = PropertyDiffKind(change.value + 1)  # the _REPLACE variant
            detailed[prop] = PropertyDiff(change, input_diff=True)
        return DiffResponse(
            changes=bool(detailed),
            replaces=replaces,
            delete_before_replace=bool(replaces) and kind.delete_before_replace,
            diffs=list(detailed),
            detailed_diff=detailed,
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def create(self, request: CreateRequest) -> CreateResponse:
        kind = self.kind(request.urn)
        inputs, secret = unmarshal(request.properties)
        if request.preview:
            outputs = dict(inputs)
            for prop in self.schema.resource(kind.token)["properties"]:
                outputs.setdefault(prop, UNKNOWN)
            return CreateResponse(resource_id="", properties=self._out(kind, outputs, secret))
        resource_id, outputs = kind.create(self.ctx, _integral_inputs(inputs))
        return CreateResponse(resource_id=resource_id, properties=self._out(kind, outputs, secret))

    async def read(self, request: ReadRequest) -> ReadResponse:
        kind = self.kind(request.urn)
        state, secret = unmarshal(request.properties)
        found = kind.read(self.ctx, request.resource_id, state)
        if found is None:
            return ReadResponse()  # gone: the engine drops it from the state
        inputs = request.inputs
        if not inputs:  # an import: the inputs are what the state holds of them
            names = self.schema.resource(kind.token)["inputProperties"]
            inputs = {k: v for k, v in request.properties.items() if k in names}
        return ReadResponse(
            resource_id=request.resource_id,
            properties=self._out(kind, found, secret),
            inputs=inputs,
        )

    async def update(self, request: UpdateRequest) -> UpdateResponse:
        kind = self.kind(request.urn)
        olds, old_secret = unmarshal(request.olds)
        news, new_secret = unmarshal(request.news)
        secret = old_secret | new_secret
        if request.preview:
            return UpdateResponse(properties=self._out(kind, {**olds, **news}, secret))
        outputs = kind.update(self.ctx, request.resource_id, olds, _integral_inputs(news))
        return UpdateResponse(properties=self._out(kind, outputs, secret))

    async def delete(self, request: DeleteRequest) -> None:
        kind = self.kind(request.urn)
        state, _ = unmarshal(request.properties)
        kind.delete(self.ctx, request.resource_id, state)

    async def invoke(self, request: InvokeRequest) -> InvokeResponse:
        function = self.functions.get(request.tok)
        if function is None:
            raise KeyError(f"the {self.name} stand-in does not serve {request.tok}")
        args, _ = unmarshal(request.args)
        args = {k: v for k, v in args.items() if v is not None}
        failures = self.schema.check_args(request.tok, args)
        if failures:
            return InvokeResponse(failures=[CheckFailure(f.property, f.reason) for f in failures])
        result = function.call(self.ctx, _integral_inputs(args))
        return InvokeResponse(return_value=marshal(result, ()))

    def _out(self, kind: Kind, outputs: Plain, secret_inputs: set[str]) -> dict[str, PropertyValue]:
        return marshal(outputs, self.secret_keys(kind, secret_inputs))


def _integral_inputs(values: Plain) -> Plain:
    """Numbers the way Terraform's schema has them: `ttl` 60.0 -> 60, recursively."""

    def walk(item: object) -> object:
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return integral(item)

    return {k: walk(v) for k, v in values.items()}


class Servicer(ProviderServicer):
    """The SDK's servicer, but an `ApiError` reaches the engine as its bare message (as a real
    provider's error does), not as the SDK's "Unexpected <class 'Exception'>: ..." with a
    Python traceback appended (`_raise_with_traceback` keeps the original as `__context__`)."""


def _answer_api_errors(name: str) -> None:
    original = getattr(ProviderServicer, name)

    async def method(self: Servicer, request: object, context: grpc.aio.ServicerContext) -> object:
        try:
            return await original(self, request, context)
        except Exception as error:
            cause = error if isinstance(error, ApiError) else error.__context__
            if isinstance(cause, ApiError):  # a Go provider's `err.Error()`, unchanged
                await context.abort(grpc.StatusCode.UNKNOWN, str(cause))
            if isinstance(cause, KeyError):  # its str() is the repr of its argument
                message = str(cause.args[0]) if len(cause.args) == 1 else str(cause)
                await context.abort(grpc.StatusCode.UNKNOWN, message)
            raise

    setattr(Servicer, name, method)


for _name in ("Check", "Diff", "Create", "Read", "Update", "Delete", "Invoke"):
    _answer_api_errors(_name)


def engine_address() -> str:
    """The engine's address the plugin was started with: its last argument that is no flag.
    pulumi/pulumi sdk/go/common/resource/plugin/plugin.go `buildPluginArguments` puts the
    engine's flags first (`--logtostderr`, `-v=N`, `--tracing URL`: the URL a separate
    argument), and the provider's arguments (`host.ServerAddr()`, provider_plugin.go) last. The
    SDK's `pulumi.provider.experimental.server.main` takes argparse's first positional: the
    same address whenever no flag carries a separate value (with `--tracing URL`, the URL)."""
    return next((arg for arg in reversed(sys.argv[1:]) if not arg.startswith("-")), "")


URN_PREFIX = "urn:pulumi:"


def _urn_fields(urn: str) -> list[str]:
    """pulumi/pulumi sdk/go/common/resource/urn/urn.go `URNName` split at its first three
    `::` (stack, project, qualified type, name): the name may hold `::` itself."""
    return urn.removeprefix(URN_PREFIX).split("::", 3)


def urn_type(urn: str) -> str:
    """urn.go `URN.Type()`: the third `::` field (`QualifiedType`, `getComponent(..., 2)`)
    after its last `$` (the parent types before it)."""
    fields = _urn_fields(urn)
    qualified = fields[2] if len(fields) > 2 else urn.removeprefix(URN_PREFIX)
    return qualified.rsplit("$", 1)[-1]


def urn_name(urn: str) -> str:
    """urn.go `URN.Name()`: everything after the third `::` (`getComponentN(..., 3, true)`)."""
    fields = _urn_fields(urn)
    return fields[3] if len(fields) > 3 else urn.removeprefix(URN_PREFIX)


def run(provider: Provider, version: str) -> None:
    """Serve `provider` as a plugin process, as `pulumi.provider.experimental.server.main`
    does: the engine's address from the arguments (`engine_address`); the port goes to stdout,
    alone on its line."""
    engine = engine_address()

    async def serve() -> None:
        server = grpc.aio.server(options=_GRPC_CHANNEL_OPTIONS)
        servicer = Servicer(sys.argv[1:], version, provider, engine_address=engine)
        provider_pb2_grpc.add_ResourceProviderServicer_to_server(servicer, server)
        port = server.add_insecure_port(address="127.0.0.1:0")
        await server.start()
        sys.stdout.buffer.write(f"{port}\n".encode())
        sys.stdout.buffer.flush()
        await server.wait_for_termination()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
