"""The pulumi-command stand-in (tests/support/standins/command_provider.py) driven as the engine
drives its plugin, against real OpenSSH servers on 127.0.0.1 (tests/support/fakes/ssh_host.py) and a
fake engine that collects the plugin's `Log` calls.

Why: the engine tests run the program's `remote.Command`s through this plugin in place of
pulumi-command's own, so what they show is only as true as the plugin's imitation of it:
Check's defaults and secrets, Diff's paths and replaces, what runs on create, update and
delete and with which connection, the errors' words, the retries, the pinned host key, the
environment an sshd refuses, and the lines the engine shows while a command runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import asyncssh
import grpc
import pytest
from asyncssh.packet import UInt32
from google.protobuf import empty_pb2
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, provider_pb2

from tests.support.fakes.ssh_host import SshHost
from tests.support.standins import schema_trim
from tests.support.standins.client import Plugin, struct, urn
from tests.support.standins.command_provider import TOKEN, VERSION
from tests.support.standins.provider import StandinProvider, engine_address, urn_name, urn_type
from tests.support.standins.random_provider import RandomPassword
from tests.support.standins.schema import load
from tests.support.standins.values import UNKNOWN, Plain

#: A jump host and a target that takes these variables (sshd keeps a keyword's first value).
OPEN_HOST = ("AllowTcpForwarding yes", "AcceptEnv FROM_TEST PULUMI_COMMAND_*")
SETENV_HINT = "Unable to set '{}'. This only works if your SSH server is configured to accept"


class FakeEngine(engine_pb2_grpc.EngineServicer):
    """The engine's `Engine` service, keeping every `LogRequest` it is sent."""

    def __init__(self) -> None:
        self.logs: list[engine_pb2.LogRequest] = []
        self._lock = threading.Lock()

    def Log(self, request: engine_pb2.LogRequest, context: Any) -> empty_pb2.Empty:
        with self._lock:
            self.logs.append(request)
        return empty_pb2.Empty()

    def of(self, urn_: str) -> list[tuple[int, str, bool]]:
        """(severity, message, ephemeral) of the logs about one resource, in order."""
        with self._lock:
            return [(r.severity, r.message, r.ephemeral) for r in self.logs if r.urn == urn_]


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[FakeEngine, str]]:
    servicer = FakeEngine()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    engine_pb2_grpc.add_EngineServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(grace=None)


@pytest.fixture(scope="module")
def plugin(engine: tuple[FakeEngine, str]) -> Iterator[Plugin]:
    with Plugin("command", engine=engine[1]) as started:
        started.configure("command", {})
        yield started


@pytest.fixture(scope="module")
def host() -> Iterator[SshHost]:
    """A jump host that also takes FROM_TEST and PULUMI_COMMAND_* through AcceptEnv."""
    with SshHost.start(sshd_options=OPEN_HOST) as started:
        yield started


@pytest.fixture(scope="module")
def plain_host() -> Iterator[SshHost]:
    """sshd as Debian ships it: AcceptEnv LANG LC_* only, no TCP forwarding."""
    with SshHost.start() as started:
        yield started


class _OddSession(asyncssh.SSHServerSession[str]):
    """What OpenSSH's sshd never does, one "command" each: `exit N SIGNAL` writes "out" then
    sends an exit-status N and an exit-signal (sshd sends one or the other); `signal SIGNAL`
    only the signal; `drop` writes "partial" and then drops the connection; `refuse` refuses
    the exec; `vanish` drops the connection before answering the exec."""

    def __init__(self) -> None:
        self._channel: Any = None
        self._command = ""
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, chan: Any) -> None:
        self._channel = chan

    def exec_requested(self, command: str) -> bool:
        self._command = command
        if command == "vanish":
            self._channel.get_extra_info("connection").abort()
        return command not in ("refuse", "vanish")

    def session_started(self) -> None:
        task = asyncio.get_running_loop().create_task(self._act(self._command.split()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _act(self, words: list[str]) -> None:
        chan = self._channel
        if words[0] == "drop":
            chan.write("partial")
            await asyncio.sleep(0.2)
            chan.get_extra_info("connection").abort()
            return
        chan.write("out\n")
        if words[0] == "exit":  # asyncssh's own `exit` then `exit_with_signal` would send one
            chan._send_request(b"exit-status", UInt32(int(words[1])))
        chan.exit_with_signal(words[-1], False, "killed" if words[0] == "exit" else "")


class _OddServer(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # no authentication: x/crypto's "none" method gets in

    def session_requested(self) -> _OddSession:
        return _OddSession()


@dataclass(frozen=True)
class OddHost:
    """An asyncssh server on 127.0.0.1 (`_OddSession`) and its host key's authorized_keys line."""

    port: int
    host_key: str

    def connection(self) -> Plain:
        return {"host": "127.0.0.1", "port": self.port, "user": "odd", "hostKey": self.host_key,
                "dialErrorLimit": 0}  # fmt: skip


@pytest.fixture(scope="module")
def odd_host() -> Iterator[OddHost]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> asyncssh.SSHAcceptor:
        return await asyncssh.listen(
            "127.0.0.1", 0, server_host_keys=[key], server_factory=_OddServer
        )

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)

    async def stop() -> None:
        server.close()
        await server.wait_closed()

    try:
        yield OddHost(server.get_port(), key.export_public_key().decode())
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def connection(target: SshHost, **changes: Any) -> Plain:
    """`remote.ConnectionArgs` for `target`, its host key pinned, as the engine sends them."""
    return {
        "host": target.host,
        "port": target.port,
        "user": target.user,
        "privateKey": target.client_private_key_openssh,
        "hostKey": target.host_public_key,
        **changes,
    }


def checked(plugin: Plugin, name: str, news: Plain) -> Plain:
    inputs, failures, _ = plugin.check(urn(TOKEN, name), news)
    assert failures == []
    return inputs


def up(plugin: Plugin, name: str, news: Plain) -> tuple[str, Plain]:
    """Check then create, as `pulumi up` does for a new resource."""
    resource_id, outputs, _ = plugin.create(
        urn(TOKEN, name), checked(plugin, name, news), ("connection",)
    )
    return resource_id, outputs


def fields_of(value: Any) -> dict[str, PropertyValue]:
    """An object PropertyValue's fields."""
    assert isinstance(value, Mapping)
    return dict(value)


def failure(call: Any) -> grpc.RpcError:
    """The error a plugin call ends in (it must end in one)."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


def refusal(plugin: Plugin, name: str, news: Plain) -> str:
    """The message of the error `up` ends in (it must end in one)."""
    return str(failure(lambda: up(plugin, name, news)).details())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- schema and Check ---------------------------------------------------------------------------
def test_schema_is_the_sdks_and_served_as_is(plugin: Plugin) -> None:
    schema = json.loads(plugin.stub.GetSchema(provider_pb2.GetSchemaRequest()).schema)
    assert (
        schema
        == load("command").data
        == json.loads(json.dumps(schema_trim.trimmed("pulumi_command")))
    )
    assert schema["version"] == VERSION
    command = schema["resources"][TOKEN]
    assert command["requiredInputs"] == ["connection"]
    assert command["inputProperties"]["triggers"]["replaceOnChanges"] is True
    assert {"stdout", "stderr"} <= set(command["properties"]) - set(command["inputProperties"])
    types = schema["types"]
    assert types["command:remote:Logging"]["enum"] == [
        {"value": v} for v in ("stdout", "stderr", "stdoutAndStderr", "none")
    ]
    proxy = types["command:remote/ProxyConnection:ProxyConnection"]["properties"]
    assert set(proxy) == set(types["command:remote/Connection:Connection"]["properties"]) - {
        "proxy"
    }


def test_check_fills_defaults_and_makes_connection_and_its_keys_secret(plugin: Plugin) -> None:
    news = {
        "connection": {
            "host": "10.0.0.2",
            "privateKey": "KEY",
            "password": "pw",
            "port": 2222,
            "dialErrorLimit": 0,
            "proxy": {"host": "10.0.0.1", "privateKey": "KEY2"},
        },
        "create": "true",
        "stdin": None,
    }
    response = plugin.stub.Check(
        provider_pb2.CheckRequest(urn=urn(TOKEN, "chk"), olds=struct({}), news=struct(news))
    )
    assert list(response.failures) == []
    inputs = PropertyValue.unmarshal_map(response.inputs)
    assert set(inputs) == {"connection", "create"}  # the null is dropped
    conn = inputs["connection"]
    assert conn.is_secret
    fields = fields_of(conn.value)
    assert {k for k, v in fields.items() if v.is_secret} == {"privateKey", "password"}
    assert {k: fields[k].value for k in ("user", "port", "dialErrorLimit", "perDialTimeout")} == {
        "user": "root",
        "port": 2222.0,
        "dialErrorLimit": 0.0,  # set, so kept (apply_defaults only fills nil fields)
        "perDialTimeout": 15.0,
    }
    proxy = fields_of(fields["proxy"].value)
    assert proxy["privateKey"].is_secret and not proxy["host"].is_secret
    assert {k: proxy[k].value for k in ("user", "port", "dialErrorLimit", "perDialTimeout")} == {
        "user": "root",
        "port": 22.0,
        "dialErrorLimit": 10.0,
        "perDialTimeout": 15.0,
    }


def test_check_fails_as_infers_decoder_does(plugin: Plugin) -> None:
    _, failures, _ = plugin.check(urn(TOKEN, "bad"), {"create": 3, "extra": True})
    assert failures == [
        ("connection", "Missing required field 'connection' on 'remote.CommandInputs'"),
        ("create", "Field 'create' on 'remote.CommandInputs' must be a 'string'; got 'float64' "
                   "instead"),
        ("extra", "Unrecognized field 'extra' on 'remote.CommandInputs'"),
    ]  # fmt: skip
    inputs, failures, secret = plugin.check(urn(TOKEN, "bad"), {"connection": {"port": 22}})
    assert failures == [
        (
            "connection",
            "An error occurred decoding 'CommandInputs.connection': 1 failures decoding:\n"
            "\thost: Missing required field 'host' on 'remote.Connection'",
        )
    ]
    assert inputs == {"connection": {"port": 22}} and secret == {"connection"}  # no defaults


def test_unserved_types_are_refused_by_name(plugin: Plugin) -> None:
    local = failure(lambda: plugin.check(urn("command:local:Command", "l"), {"create": "true"}))
    assert "serves only command:remote:Command, not command:local:Command" in local.details()
    other = failure(lambda: plugin.check(urn("command:remote:Nope", "n"), {}))
    assert other.details() == "Resource 'command:remote:Nope' not found"


def test_names_with_double_colons_are_read_as_urn_name_reads_them(plugin: Plugin) -> None:
    """pulumi/pulumi urn.go `URN.Type()` and `URN.Name()`: the type is the third `::` field
    (after its last `$`), the name all after the third `::`, which may hold `::` itself."""
    nested = "urn:pulumi:dev::proj::my:app:Box$command:remote:Command::web::1"
    assert (urn_type(nested), urn_name(nested)) == ("command:remote:Command", "web::1")
    random = StandinProvider("random", [RandomPassword()], [])
    token = "random:index/randomPassword:RandomPassword"
    assert random.kind(urn(token, "pw::db")).token == token  # provider.py `kind`
    unreachable = {"host": "127.0.0.1", "port": closed_port(), "dialErrorLimit": 0}
    resource_id, outputs = up(plugin, "web::1", {"connection": unreachable})  # nothing to run
    assert re.fullmatch(r"web::1[0-9a-f]{8}", resource_id)  # NewUniqueHex(req.Name, 8, 0)
    assert outputs["stdout"] == ""


def test_the_engine_address_is_the_last_argument(
    engine: tuple[FakeEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """plugin.go `buildPluginArguments`: the engine's flags first (`--tracing` with its URL as
    the next argument), the address last; the plugin's `Log`s must reach that address."""
    flags = ("--logtostderr", "-v=9", "--tracing", "http://127.0.0.1:1/trace")
    monkeypatch.setattr(sys, "argv", ["plugin", *flags, "127.0.0.1:9"])
    assert engine_address() == "127.0.0.1:9"
    monkeypatch.setattr(sys, "argv", ["plugin", "127.0.0.1:9"])
    assert engine_address() == "127.0.0.1:9"
    news = {"connection": {"host": "127.0.0.1", "port": closed_port(), "dialErrorLimit": 1},
            "create": "true"}  # fmt: skip
    with Plugin("command", engine=engine[1], flags=flags) as flagged:
        failure(lambda: up(flagged, "flagged", news))
    assert engine[0].of(urn(TOKEN, "flagged")) == [
        (engine_pb2.INFO, "Dial 1/1 failed: retrying", True)
    ]


# -- Diff ---------------------------------------------------------------------------------------
def diff(plugin: Plugin, olds: Plain, news: Plain) -> tuple[int, list[str], dict[str, int]]:
    """(changes, replaces, {path: kind}) of a Diff from the state `olds` to the inputs `news`."""
    state = {**olds, "stdout": "out", "stderr": ""}
    response = plugin.diff(urn(TOKEN, "d"), "d1234abcd", state, news)
    kinds = {path: d.kind for path, d in response.detailedDiff.items()}
    return response.changes, sorted(response.replaces), kinds


def test_diff_replaces_on_triggers_and_updates_on_the_rest(plugin: Plugin) -> None:
    base = {"connection": {"host": "h", "port": 22}, "create": "a", "triggers": ["x", 1]}
    some, none = provider_pb2.DiffResponse.DIFF_SOME, provider_pb2.DiffResponse.DIFF_NONE
    kind = provider_pb2.PropertyDiff
    assert diff(plugin, base, dict(base)) == (none, [], {})
    assert diff(plugin, base, {**base, "create": "b"}) == (some, [], {"create": kind.UPDATE})
    assert diff(plugin, base, {**base, "connection": {"host": "h", "port": 23}}) == (
        some,
        [],
        {"connection.port": kind.UPDATE},
    )
    without = {k: v for k, v in base.items() if k != "triggers"}
    assert diff(plugin, without, base) == (some, ["triggers"], {"triggers": kind.ADD_REPLACE})
    assert diff(plugin, base, without) == (some, ["triggers"], {"triggers": kind.DELETE_REPLACE})
    # An element's change is a path under `triggers`, which infer does not find among the
    # replaceOnChanges inputs: the provider says update; the SDK's `replace_on_changes=
    # ["triggers[*]"]` is what makes the engine replace.
    assert diff(plugin, base, {**base, "triggers": ["y", 1, True]}) == (
        some,
        [],
        {"triggers[0]": kind.UPDATE, "triggers[2]": kind.ADD},
    )
    assert diff(plugin, base, {**base, "environment": {"A-B": "1"}})[2] == {"environment": kind.ADD}


def test_diff_compares_secrets_whole_and_ignores_what_is_ignored(plugin: Plugin) -> None:
    state = {"connection": {"host": "h"}, "create": "a", "stdout": "", "stderr": ""}
    news = {"connection": {"host": "h2"}, "create": "b"}
    response = plugin.stub.Diff(
        provider_pb2.DiffRequest(
            urn=urn(TOKEN, "s"),
            id="s1",
            olds=struct(state, ("connection",)),
            news=struct(news, ("connection",)),
            ignoreChanges=["create"],
        )
    )
    assert dict(response.detailedDiff) == {
        "connection": provider_pb2.PropertyDiff(kind=provider_pb2.PropertyDiff.UPDATE)
    }


# -- Create -------------------------------------------------------------------------------------
def test_create_runs_the_command_with_stdin_and_returns_both_streams(
    plugin: Plugin, host: SshHost
) -> None:
    resource_id, outputs = up(
        plugin,
        "create",
        {
            "connection": connection(host),
            "create": "cat; echo to-err >&2; printf 'last\\n\\n'",
            "stdin": "from stdin\n",
        },
    )
    assert re.fullmatch(r"create[0-9a-f]{8}", resource_id)
    assert outputs["stdout"] == "from stdin\nlast\n"  # one trailing newline trimmed
    assert outputs["stderr"] == "to-err"
    assert outputs["create"].startswith("cat;") and outputs["connection"]["host"] == host.host


def test_create_in_a_preview_or_without_create_runs_nothing(plugin: Plugin, host: SshHost) -> None:
    marker = host.home / "previewed"
    news = {"connection": connection(host), "create": f"touch {marker}"}
    inputs = checked(plugin, "preview", news)
    resource_id, outputs, _ = plugin.create(urn(TOKEN, "preview"), inputs, preview=True)
    assert resource_id.startswith("preview") and not marker.exists()
    assert outputs["stdout"] == outputs["stderr"] == UNKNOWN
    assert outputs["create"] == news["create"]
    unknown = checked(plugin, "unknown", {"connection": {"host": UNKNOWN}, "create": UNKNOWN})
    assert unknown["connection"] == {"host": UNKNOWN, "user": "root", "port": 22,
                                     "dialErrorLimit": 10, "perDialTimeout": 15}  # fmt: skip
    _, outputs, _ = plugin.create(urn(TOKEN, "unknown"), unknown, preview=True)
    assert outputs["create"] == outputs["stdout"] == UNKNOWN
    unreachable = connection(host, port=closed_port(), dialErrorLimit=0)
    _, outputs = up(plugin, "nocreate", {"connection": unreachable})
    assert (outputs["stdout"], outputs["stderr"]) == ("", "")  # nothing dialled either


def test_a_failing_create_is_an_error_with_the_command_and_its_output(
    plugin: Plugin, host: SshHost
) -> None:
    command = 'echo out; echo "err" >&2; exit 3'
    error = failure(
        lambda: up(plugin, "fails", {"connection": connection(host), "create": command})
    )
    assert error.code() == grpc.StatusCode.UNKNOWN
    assert error.details() == (
        'Process exited with status 3: running "echo out; echo \\"err\\" >&2; exit 3":\nout\nerr\n'
    )
    # pulumi-command 1.2.1 returns no partial state (no ErrorResourceInitFailed detail).
    assert "grpc-status-details-bin" not in dict(error.trailing_metadata() or ())


def test_an_output_ending_in_a_quote_is_kept_whole(plugin: Plugin, host: SshHost) -> None:
    """provider.py `_answer_api_errors` hands an error's message on unchanged: only a KeyError's
    str() has quotes of its own (its argument's repr)."""
    command = "printf \"'q'\"; exit 1"
    error = failure(
        lambda: up(plugin, "quote", {"connection": connection(host), "create": command})
    )
    assert error.details() == (
        "Process exited with status 1: running \"printf \\\"'q'\\\"; exit 1\":\n'q'"
    )


# -- Update and Delete --------------------------------------------------------------------------
def test_update_runs_update_else_create_with_the_previous_output(
    plugin: Plugin, host: SshHost
) -> None:
    news = {
        "connection": connection(host),
        "create": "echo created",
        "update": 'echo "$PULUMI_COMMAND_STDOUT+updated"',
    }
    resource_id, state = up(plugin, "upd", news)
    assert state["stdout"] == "created"
    inputs = checked(plugin, "upd", {**news, "triggers": [1]})
    updated = plugin.update(urn(TOKEN, "upd"), resource_id, state, inputs)
    assert updated["stdout"] == "created+updated" and updated["triggers"] == [1]
    no_update = {k: v for k, v in news.items() if k != "update"}
    again = plugin.update(
        urn(TOKEN, "upd"), resource_id, updated, checked(plugin, "upd", no_update)
    )
    assert again["stdout"] == "created"
    off = {**news, "addPreviousOutputInEnv": False}
    quiet = plugin.update(urn(TOKEN, "upd"), resource_id, updated, checked(plugin, "upd", off))
    assert quiet["stdout"] == "+updated"


def test_update_in_a_preview_runs_nothing(plugin: Plugin, host: SshHost) -> None:
    """infer's `markComputed` on update: `stdout`/`stderr` unknown when an input the state has
    changed (or is unknown); an input the state lacks does not count, so they stay."""
    marker = host.home / "updated"
    news = {"connection": connection(host), "create": "echo one"}
    resource_id, state = up(plugin, "updpre", news)
    changed = checked(plugin, "updpre", {**news, "create": f"touch {marker}"})
    preview = plugin.update(urn(TOKEN, "updpre"), resource_id, state, changed, preview=True)
    assert preview["stdout"] == preview["stderr"] == UNKNOWN and not marker.exists()
    assert preview["create"] == f"touch {marker}"
    added = checked(plugin, "updpre", {**news, "update": f"touch {marker}"})
    preview = plugin.update(urn(TOKEN, "updpre"), resource_id, state, added, preview=True)
    assert (preview["stdout"], preview["stderr"]) == ("one", "") and not marker.exists()


def test_delete_runs_delete_from_the_state_and_nothing_without_it(
    plugin: Plugin, host: SshHost
) -> None:
    marker = host.home / "deleted"
    news = {
        "connection": connection(host),
        "create": "echo kept",
        "delete": f'echo "$PULUMI_COMMAND_STDOUT" > {marker}',
    }
    resource_id, state = up(plugin, "del", news)
    plugin.delete(urn(TOKEN, "del"), resource_id, state)
    assert marker.read_text() == "kept\n"
    unreachable = {**state, "connection": connection(host, port=closed_port(), dialErrorLimit=0)}
    plugin.delete(urn(TOKEN, "del"), resource_id, {**unreachable, "delete": None})
    gone = failure(lambda: plugin.delete(urn(TOKEN, "del"), resource_id, unreachable))
    assert gone.details().startswith("after 0 failed attempts: dial tcp 127.0.0.1:")


def test_read_hands_the_state_back(plugin: Plugin) -> None:
    state = {"connection": {"host": "h"}, "create": "a", "stdout": "o", "stderr": ""}
    assert plugin.read(urn(TOKEN, "r"), "r1", state, {"create": "a"}) == ("r1", state)


# -- dialling -----------------------------------------------------------------------------------
def test_the_host_key_is_pinned(
    plugin: Plugin, host: SshHost, plain_host: SshHost, engine: tuple[FakeEngine, str]
) -> None:
    _, outputs = up(plugin, "key", {"connection": connection(host), "create": "echo pinned"})
    assert outputs["stdout"] == "pinned"
    unpinned = {k: v for k, v in connection(host).items() if k != "hostKey"}
    assert up(plugin, "nokey", {"connection": unpinned, "create": "echo any"})[1]["stdout"] == "any"
    wrong = connection(host, hostKey=plain_host.host_public_key, dialErrorLimit=1)
    error = failure(lambda: up(plugin, "wrongkey", {"connection": wrong, "create": "true"}))
    assert (
        error.details() == "after 1 failed attempts: ssh: handshake failed: ssh: host key mismatch"
    )
    assert engine[0].of(urn(TOKEN, "wrongkey")) == [
        (engine_pb2.INFO, "Dial 1/1 failed: retrying", True)
    ]


def test_keys_and_their_failures_in_x_crypto_words(
    plugin: Plugin, host: SshHost, plain_host: SshHost
) -> None:
    encrypted = asyncssh.import_private_key(host.client_private_key_openssh).export_private_key(
        "openssh", passphrase="pw"
    )
    locked = connection(host, privateKey=encrypted.decode(), privateKeyPassword="pw")
    assert up(plugin, "locked", {"connection": locked, "create": "echo k"})[1]["stdout"] == "k"
    del locked["privateKeyPassword"]
    error = failure(lambda: up(plugin, "nopass", {"connection": locked, "create": "true"}))
    assert error.details() == "ssh: this private key is passphrase protected"  # before any dial
    stranger = connection(host, privateKey=plain_host.client_private_key_openssh, dialErrorLimit=0)
    error = failure(lambda: up(plugin, "stranger", {"connection": stranger, "create": "true"}))
    assert error.details() == (
        "after 0 failed attempts: ssh: handshake failed: ssh: unable to authenticate, "
        "attempted methods [none publickey], no supported methods remain"
    )


def test_a_private_key_password_needs_an_encrypted_key(plugin: Plugin, host: SshHost) -> None:
    """x/crypto keys.go `ParsePrivateKeyWithPassphrase` (`ParseRawPrivateKeyWithPassphrase`):
    an OpenSSH key without cipher is "not password protected", a PEM block without legacy
    encryption "not an encrypted key" (PKCS#8's own encryption too); without a passphrase
    (`ParseRawPrivateKey`) an encrypted PKCS#8 block is a type it does not take."""
    key = asyncssh.import_private_key(host.client_private_key_openssh)
    pkcs8 = key.export_private_key("pkcs8-pem").decode()
    sealed = key.export_private_key("pkcs8-pem", passphrase="pw").decode()
    cases = [
        (host.client_private_key_openssh, "pw", "ssh: key is not password protected"),
        (pkcs8, "pw", "ssh: not an encrypted key"),
        (sealed, "pw", "ssh: not an encrypted key"),
        (sealed, None, 'ssh: unsupported key type "ENCRYPTED PRIVATE KEY"'),
        ("no key here", "pw", "ssh: no key found"),
    ]
    for index, (private_key, password, expected) in enumerate(cases):
        keyed = connection(host, privateKey=private_key, privateKeyPassword=password)
        news = {"connection": keyed, "create": "true"}
        assert refusal(plugin, f"pw{index}", news) == expected  # before any dial
    plain_pem = connection(host, privateKey=pkcs8)
    assert up(plugin, "pkcs8", {"connection": plain_pem, "create": "echo p"})[1]["stdout"] == "p"


def test_the_host_key_is_parsed_as_parse_authorized_key_does(plugin: Plugin, host: SshHost) -> None:
    """x/crypto keys.go `ParseAuthorizedKey` (v0.48.0): the key's type comes from its blob, not
    from the word before it; options, comments and "#" lines are skipped; no key is "ssh: no key
    found", with the last line's error; `SSHConfig` wraps it "failed to parse host key: %w"."""
    blob = host.host_public_key.split()[1]
    taken = [
        f"ssh-rsa {blob}",
        f'# the VM\n\nno-pty,command="echo a b" {host.host_public_key} comment',
    ]
    for index, host_key in enumerate(taken):
        keyed = connection(host, hostKey=host_key)
        _, outputs = up(plugin, f"hk{index}", {"connection": keyed, "create": "echo in"})
        assert outputs["stdout"] == "in"
    refused = [
        ("ssh-ed25519 !!!!", "; last parsing error for ignored line: "
                             "illegal base64 data at input byte 0"),
        ("ssh-ed25519 AAAA", "; last parsing error for ignored line: ssh: short read"),
        ("# only a comment", ""),
    ]  # fmt: skip
    for index, (host_key, last) in enumerate(refused):
        keyed = connection(host, hostKey=host_key)
        news = {"connection": keyed, "create": "true"}
        assert refusal(plugin, f"bad{index}", news) == (
            f"failed to parse host key: ssh: no key found{last}"  # before any dial
        )


def test_dial_retries_up_to_the_error_limit_with_backoff(
    plugin: Plugin, host: SshHost, engine: tuple[FakeEngine, str]
) -> None:
    port = closed_port()
    news = {"connection": connection(host, port=port, dialErrorLimit=2), "create": "true"}
    started = time.monotonic()
    error = failure(lambda: up(plugin, "retry", news))
    assert time.monotonic() - started >= 0.25  # waited 100 ms, then 150 ms
    assert error.details() == (
        f"after 2 failed attempts: dial tcp 127.0.0.1:{port}: connect: connection refused"
    )
    assert [m for _, m, _ in engine[0].of(urn(TOKEN, "retry"))] == [
        "Dial 1/2 failed: retrying",
        "Dial 2/2 failed: retrying",
    ]


def test_each_dial_is_bounded_by_the_per_dial_timeout(plugin: Plugin, host: SshHost) -> None:
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # one pending connection fills the queue: later SYNs go unanswered
        port = listener.getsockname()[1]
        stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        news = {
            "connection": connection(host, port=port, dialErrorLimit=0, perDialTimeout=1),
            "create": "true",
        }
        started = time.monotonic()
        error = failure(lambda: up(plugin, "timeout", news))
    assert 0.9 <= time.monotonic() - started < 5
    assert error.details() == f"after 0 failed attempts: dial tcp 127.0.0.1:{port}: i/o timeout"


def test_a_command_runs_through_a_jump_host(
    plugin: Plugin, host: SshHost, plain_host: SshHost
) -> None:
    proxied = connection(plain_host, proxy=connection(host))
    _, outputs = up(plugin, "jump", {"connection": proxied, "create": "echo via; whoami"})
    assert outputs["stdout"] == f"via\n{plain_host.user}"
    refused = connection(host, proxy=connection(plain_host), dialErrorLimit=0)
    error = failure(lambda: up(plugin, "nojump", {"connection": refused, "create": "true"}))
    assert error.details() == (
        "proxy: after 0 failed attempts: ssh: rejected: administratively prohibited (open failed)"
    )


# -- the session's end ---------------------------------------------------------------------------
def test_a_status_sent_with_a_signal_is_the_one_reported(plugin: Plugin, odd_host: OddHost) -> None:
    """x/crypto session.go `wait`: the exit-status when one came (0: success), 128+N from the
    signal only without one; the signal's name and message are reported with either."""
    news = {"connection": odd_host.connection()}
    error = failure(lambda: up(plugin, "both", {**news, "create": "exit 3 TERM"}))
    assert error.details() == (
        'Process exited with status 3 from signal TERM. Reason was: killed: running "exit 3 '
        'TERM":\nout\n'
    )
    assert up(plugin, "zero", {**news, "create": "exit 0 TERM"})[1]["stdout"] == "out"
    error = failure(lambda: up(plugin, "sig", {**news, "create": "signal KILL"}))
    assert error.details() == (
        'Process exited with status 137 from signal KILL: running "signal KILL":\nout\n'
    )


def test_a_lost_connection_or_refused_exec_fails_as_session_run_does(
    plugin: Plugin, odd_host: OddHost
) -> None:
    """commandOutputs.go `run` wraps every `session.Run` error `"%w: running %q:\n%s"`: a
    connection lost while the command runs ends `Wait` without an exit status
    (`ExitMissingError`); one lost before the exec's answer fails `Start` with channel.go
    `SendRequest`'s io.EOF; a refused exec fails it with "ssh: command %v failed"."""
    news = {"connection": odd_host.connection()}
    error = failure(lambda: up(plugin, "drop", {**news, "create": "drop"}))
    assert error.details() == (
        'wait: remote command exited without exit status or exit signal: running "drop":\npartial'
    )
    assert refusal(plugin, "vanish", {**news, "create": "vanish"}) == 'EOF: running "vanish":\n'
    error = failure(lambda: up(plugin, "refuse", {**news, "create": "refuse"}))
    assert error.details() == 'ssh: command refuse failed: running "refuse":\n'


# -- environment and logging ---------------------------------------------------------------------
def test_environment_needs_accept_env(
    plugin: Plugin, host: SshHost, plain_host: SshHost, engine: tuple[FakeEngine, str]
) -> None:
    news = {"create": 'echo "$FROM_TEST/$LANG"', "environment": {"FROM_TEST": "yes", "LANG": "C"}}
    _, outputs = up(plugin, "env", {**news, "connection": connection(host)})
    assert outputs["stdout"] == "yes/C"
    marker = plain_host.home / "ran"
    refused = {**news, "create": f"touch {marker}", "connection": connection(plain_host)}
    error = failure(lambda: up(plugin, "noenv", refused))
    assert error.details() == 'could not set environment variable "FROM_TEST": ssh: setenv failed'
    assert not marker.exists()
    [(severity, message, ephemeral)] = engine[0].of(urn(TOKEN, "noenv"))
    assert (severity, ephemeral) == (engine_pb2.ERROR, False)
    assert message.startswith(SETENV_HINT.format("FROM_TEST"))


def test_a_refused_previous_output_is_only_a_warning(
    plugin: Plugin, plain_host: SshHost, engine: tuple[FakeEngine, str]
) -> None:
    news = {"connection": connection(plain_host), "create": 'echo "[$PULUMI_COMMAND_STDOUT]"'}
    resource_id, state = up(plugin, "warn", news)
    assert state["stdout"] == "[]"
    updated = plugin.update(urn(TOKEN, "warn"), resource_id, state, checked(plugin, "warn", news))
    assert updated["stdout"] == "[]"
    warnings = [m for s, m, _ in engine[0].of(urn(TOKEN, "warn")) if s == engine_pb2.WARNING]
    assert [m.split(".")[0] for m in warnings] == ["Unable to set 'PULUMI_COMMAND_STDOUT'"]


@pytest.mark.parametrize(
    ("logging", "expected"),
    [
        (None, ["o1", "e1", "o2"]),
        ("stdoutAndStderr", ["o1", "e1", "o2"]),
        ("stdout", ["o1", "o2"]),
        ("stderr", ["e1"]),
        ("none", []),
    ],
)
def test_output_lines_reach_the_engine_as_logging_says(
    plugin: Plugin,
    host: SshHost,
    engine: tuple[FakeEngine, str],
    logging: str | None,
    expected: list[str],
) -> None:
    name = f"log-{logging}"
    command = "echo o1; sleep 0.2; echo e1 >&2; sleep 0.2; printf o2"
    news = {"connection": connection(host), "create": command, "logging": logging}
    _, outputs = up(plugin, name, news)
    assert (outputs["stdout"], outputs["stderr"]) == ("o1\no2", "e1")
    assert engine[0].of(urn(TOKEN, name)) == [(engine_pb2.INFO, line, True) for line in expected]


def test_secrets_come_back_secret(plugin: Plugin, host: SshHost) -> None:
    """Check's inputs go to Create as the engine passes them: `connection` and the keys in it
    stay secret in the state; the outputs are not (`additionalSecretOutputs` is the engine's)."""
    news = {"connection": connection(host), "create": "echo s"}
    checked_inputs = plugin.stub.Check(
        provider_pb2.CheckRequest(urn=urn(TOKEN, "sec"), olds=struct({}), news=struct(news))
    ).inputs
    response = plugin.stub.Create(
        provider_pb2.CreateRequest(urn=urn(TOKEN, "sec"), properties=checked_inputs)
    )
    outputs = PropertyValue.unmarshal_map(response.properties)
    assert outputs["connection"].is_secret
    fields = fields_of(outputs["connection"].value)
    assert fields["privateKey"].is_secret and not fields["host"].is_secret
    assert not outputs["stdout"].is_secret and outputs["stdout"].value == "s"
