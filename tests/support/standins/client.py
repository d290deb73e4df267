"""Drive a stand-in plugin the way the engine does: start `pulumi-resource-NAME` from
tests/support/standins/bin/ with an engine address, read its port from stdout, and call it over gRPC
with the pulumi SDK's generated stubs (`pulumi.runtime.proto`). For tests; one process per client.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tests.support.standins.values import Plain, marshal, unmarshal

BIN = Path(__file__).resolve().parent / "bin"


def struct(values: Plain, secret: tuple[str, ...] = ()) -> struct_pb2.Struct:
    return PropertyValue.marshal_map(marshal(values, secret))


def plain(message: struct_pb2.Struct) -> tuple[Plain, set[str]]:
    return unmarshal(PropertyValue.unmarshal_map(message))


def urn(token: str, name: str, stack: str = "test", project: str = "standins") -> str:
    return f"urn:pulumi:{stack}::{project}::{token}::{name}"


class Plugin:
    """A running stand-in plugin process and a gRPC stub to it."""

    def __init__(
        self,
        name: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        engine: str = "127.0.0.1:1",
        flags: Sequence[str] = (),
    ) -> None:
        """`engine`: the engine address the plugin gets (where a provider sends its `Log`s);
        the default has nobody listening. `flags`: the engine's own flags, which it passes
        before the address (`--logtostderr`, `-v=N`, `--tracing URL`)."""
        environment = {**os.environ, "TPU_VLLM_STANDIN_PYTHON": sys.executable, **(env or {})}
        self.process = subprocess.Popen(
            [str(BIN / f"pulumi-resource-{name}"), *flags, engine],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            cwd=cwd,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.isdigit():
            self.process.kill()
            _, err = self.process.communicate(timeout=10)
            raise RuntimeError(f"pulumi-resource-{name} printed {line!r} for a port: {err}")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{line}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)

    def close(self) -> str:
        """Stop the process; its stderr."""
        self.channel.close()
        self.process.terminate()
        _, err = self.process.communicate(timeout=10)
        return err

    def __enter__(self) -> Plugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the protocol -----------------------------------------------------------------------
    def configure(self, package: str, config: dict[str, str]) -> None:
        self.stub.Configure(
            provider_pb2.ConfigureRequest(
                variables={f"{package}:config:{k}": v for k, v in config.items()},
                args=struct(dict(config)),
                acceptSecrets=True,
                acceptResources=True,
            )
        )

    def check(
        self, urn_: str, news: Plain, olds: Plain | None = None, seed: bytes = b"seed"
    ) -> tuple[Plain, list[tuple[str, str]], set[str]]:
        response = self.stub.Check(
            provider_pb2.CheckRequest(
                urn=urn_, olds=struct(olds or {}), news=struct(news), randomSeed=seed
            )
        )
        inputs, secret = plain(response.inputs)
        return inputs, [(f.property, f.reason) for f in response.failures], secret

    def diff(self, urn_: str, resource_id: str, olds: Plain, news: Plain) -> Any:
        return self.stub.Diff(
            provider_pb2.DiffRequest(urn=urn_, id=resource_id, olds=struct(olds), news=struct(news))
        )

    def create(
        self, urn_: str, inputs: Plain, secret: tuple[str, ...] = (), preview: bool = False
    ) -> tuple[str, Plain, set[str]]:
        response = self.stub.Create(
            provider_pb2.CreateRequest(urn=urn_, properties=struct(inputs, secret), preview=preview)
        )
        outputs, secrets = plain(response.properties)
        return response.id, outputs, secrets

    def read(self, urn_: str, resource_id: str, state: Plain, inputs: Plain) -> tuple[str, Plain]:
        response = self.stub.Read(
            provider_pb2.ReadRequest(
                urn=urn_, id=resource_id, properties=struct(state), inputs=struct(inputs)
            )
        )
        return response.id, plain(response.properties)[0]

    def update(
        self, urn_: str, resource_id: str, olds: Plain, news: Plain, preview: bool = False
    ) -> Plain:
        response = self.stub.Update(
            provider_pb2.UpdateRequest(
                urn=urn_, id=resource_id, olds=struct(olds), news=struct(news), preview=preview
            )
        )
        return plain(response.properties)[0]

    def delete(self, urn_: str, resource_id: str, state: Plain) -> None:
        self.stub.Delete(
            provider_pb2.DeleteRequest(urn=urn_, id=resource_id, properties=struct(state))
        )

    def invoke(self, token: str, args: Plain) -> tuple[Plain, list[tuple[str, str]]]:
        response = self.stub.Invoke(provider_pb2.InvokeRequest(tok=token, args=struct(args)))
        return plain(getattr(response, "return"))[0], [
            (f.property, f.reason) for f in response.failures
        ]

    def up(
        self, token: str, name: str, news: Plain, secret: tuple[str, ...] = ()
    ) -> tuple[str, Plain]:
        """Check then create, as `pulumi up` does for a new resource; fails on a check failure."""
        inputs, failures, _ = self.check(urn(token, name), news)
        assert not failures, failures
        resource_id, outputs, _ = self.create(urn(token, name), inputs, secret)
        return resource_id, outputs
