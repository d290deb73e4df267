"""The SSH half of the pulumi-command stand-in: dial a host and run one command on it.

Imitates pulumi/pulumi-command v1.2.1 `provider/pkg/provider/remote/`, which drives
golang.org/x/crypto/ssh (v0.48.0); here asyncssh does the SSH. Each function names the Go it
follows. Errors are worded as x/crypto and Go's `net` word them ("dial tcp 127.0.0.1:22: connect:
connection refused", "ssh: handshake failed: ssh: host key mismatch", "Process exited with status
1"), since that text is what the engine shows and what the program's tests read.

What asyncssh cannot do through its public API, and how it is done here:
- `Session.Setenv` sends "env" with want_reply true and fails on a refusal; asyncssh sends "env"
  without a reply. `_SetenvChannel` sends each one itself, awaiting the answer, between the
  session's opening and its "exec" (asyncssh's channel internals `_open` and `_make_request`,
  pinned with asyncssh 2.24.1 in requirements-dev.txt).
- A jump host's `proxyClient.Dial` gives a `net.Conn` the second handshake runs over; here the
  direct-tcpip channel is bridged to one end of a socket pair, handed to asyncssh as its socket.
- x/crypto's session takes an exit-status and an exit-signal both (asyncssh drops the
  connection on the second): `_SetenvChannel` reads them itself.
- Keys are read the way x/crypto reads them before asyncssh sees them
  (tests/support/standins/command_keys.py); asyncssh only builds the key from what x/crypto would
  take.

Left out: Windows agent pipes (`connection_windows.go`); the stall behind `bufio.Scanner`'s 64 KiB
line limit (a longer output line ends util.LogOutput's scan, and pulumi-command's command then
blocks on its full log pipe; here the logging stops and the command goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import asyncssh
from asyncssh.packet import SSHPacket, String

from tests.support.standins.command_keys import (
    SshError,
    go_quote,
    parse_authorized_key,
    parse_private_key,
)

T = TypeVar("T")

PULUMI_COMMAND_STDOUT = "PULUMI_COMMAND_STDOUT"  # util/util.go
PULUMI_COMMAND_STDERR = "PULUMI_COMMAND_STDERR"
#: connection.go `dialErrorDefault`, `dialErrorUnlimited`.
DIAL_ERROR_DEFAULT = 10
DIAL_ERROR_UNLIMITED = -1
#: pulumi/pulumi sdk/go/common/util/retry/until.go: DefaultDelay, DefaultBackoff, DefaultMaxDelay.
RETRY_DELAY, RETRY_BACKOFF, RETRY_MAX_DELAY = 0.1, 1.5, 5.0
#: bufio.Scanner's MaxScanTokenSize, which util.LogOutput's scanner keeps.
MAX_LOG_LINE = 64 * 1024
#: asyncssh's own session defaults (connection.py `_DEFAULT_WINDOW`, `_DEFAULT_MAX_PKTSIZE`).
WINDOW, MAX_PACKET = 2 * 1024 * 1024, 32 * 1024
#: x/crypto/ssh session.go `signals`: an exit signal's status is 128 plus its number.
SIGNALS = {"ABRT": 6, "ALRM": 14, "FPE": 8, "HUP": 1, "ILL": 4, "INT": 2, "KILL": 9,
           "PIPE": 13, "QUIT": 3, "SEGV": 11, "TERM": 15, "USR1": 10, "USR2": 12}  # fmt: skip
#: x/crypto/ssh `RejectionReason.String()`, by the channel-open failure code.
REJECTIONS = {1: "administratively prohibited", 2: "connect failed",
              3: "unknown channel type", 4: "resource shortage"}  # fmt: skip
#: logAndWrapSetenvErr's message (commandOutputs.go), with its raw string's tab indents.
SETENV_HINT = (
    "Unable to set '{}'. This only works if your SSH server is configured to accept\n"
    "\tthese variables via AcceptEnv. Alternatively, if a Bash-like shell runs the command on "
    "the remote host, you could\n"
    "\tprefix the command itself with the variables in the form 'VAR=value command'"
)

NO_METHODS_LEFT = "no supported methods remain"  # x/crypto client_auth.go


class Log(Protocol):
    """pulumi-go-provider's `Logger` for the resource (logging.go): what reaches the engine."""

    async def info_status(self, message: str) -> None: ...

    async def warning(self, message: str) -> None: ...

    async def error(self, message: str) -> None: ...


# -- the connection inputs -------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    """One `connectionBase` (connection.go): the host itself, or its `proxy`. Check has filled
    `Annotate`'s defaults; they stand here too for a state written without them."""

    host: str
    port: int = 22
    user: str = "root"
    password: str | None = None
    private_key: str | None = None
    private_key_password: str | None = None
    agent_socket_path: str | None = None
    dial_error_limit: int = DIAL_ERROR_DEFAULT
    per_dial_timeout: int = 15
    host_key: str | None = None

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> Endpoint:
        def text(key: str) -> str | None:
            value = inputs.get(key)
            return None if value is None else str(value)

        def number(key: str, default: int) -> int:
            value = inputs.get(key)
            return default if value is None else int(value)  # `int(*c.Port)`: truncated

        return cls(
            host=str(inputs["host"]),
            port=number("port", 22),
            user=str(inputs.get("user", "root")),
            password=text("password"),
            private_key=text("privateKey"),
            private_key_password=text("privateKeyPassword"),
            agent_socket_path=text("agentSocketPath"),
            dial_error_limit=number("dialErrorLimit", DIAL_ERROR_DEFAULT),
            per_dial_timeout=number("perDialTimeout", 15),
            host_key=text("hostKey"),
        )

    @property
    def address(self) -> str:
        """`net.JoinHostPort`: an IPv6 literal in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Connection:
    """`Connection` (connection.go): the target and the optional jump host."""

    target: Endpoint
    proxy: Endpoint | None = None

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> Connection:
        proxy = inputs.get("proxy")
        return cls(
            Endpoint.from_inputs(inputs),
            Endpoint.from_inputs(proxy) if isinstance(proxy, Mapping) else None,
        )


# -- SSHConfig -----------------------------------------------------------------------------
class _Client(asyncssh.SSHClient):
    """The auth side of `SSHConfig` for one connection attempt: the keys (the private key, else
    the agent's), the password, and `ssh.KeyboardInteractive` answering every question with the
    password. Each method is handed over once, when asyncssh tries it, and noted, so a failure
    can name them as x/crypto's `tried` does."""

    def __init__(self, keys: Sequence[asyncssh.SSHKeyPair], password: str | None) -> None:
        self._keys = list(keys)
        self._password = password
        self._password_left = password
        self.tried = ["none"]

    def _try(self, method: str) -> None:
        if method not in self.tried:
            self.tried.append(method)

    def public_key_auth_requested(self) -> list[asyncssh.SSHKeyPair] | None:
        keys, self._keys = self._keys, []
        if keys:
            self._try("publickey")
        return keys or None

    def password_auth_requested(self) -> str | None:
        password, self._password_left = self._password_left, None
        if password is not None:
            self._try("password")
        return password

    def kbdint_auth_requested(self) -> str | None:
        if self._password is None:
            return None
        self._try("keyboard-interactive")
        return ""

    def kbdint_challenge_received(
        self, name: str, instructions: str, lang: str, prompts: Sequence[tuple[str, bool]]
    ) -> Sequence[str] | None:
        return [self._password or ""] * len(prompts)


@dataclass(frozen=True)
class ClientConfig:
    """What `connectionBase.SSHConfig` (connection.go) makes, as asyncssh's connect arguments,
    and the clients of the attempts made with it (the last one's `tried` for the error)."""

    options: Mapping[str, Any]
    clients: list[_Client] = field(default_factory=list)

    def tried(self) -> list[str]:
        return self.clients[-1].tried if self.clients else ["none"]


async def client_config(endpoint: Endpoint, stack: contextlib.AsyncExitStack) -> ClientConfig:
    """`SSHConfig`: the host key pinned with its own algorithm only (`FixedHostKey`,
    `HostKeyAlgorithms: []string{publicKey.Type()}`), or not checked at all; then the private
    key, the password (and keyboard-interactive with it), and the agent (`agentSocketPath`, else
    `SSH_AUTH_SOCK`, dialled now: a dead socket fails the command before any dial). x/crypto
    tries each method name once, so the agent's keys count only without a private key."""
    options: dict[str, Any] = {
        "username": endpoint.user,
        "known_hosts": None,
        "client_keys": None,  # from `_Client`: no default keys from ~/.ssh, no agent of its own
        "password": None,
        "login_timeout": 0,  # x/crypto's handshake has no deadline of its own
        "gss_host": None,
    }
    if endpoint.host_key is not None:
        key = parse_authorized_key(endpoint.host_key)
        options["known_hosts"] = ([key], [], [])
        options["server_host_key_algs"] = [key.get_algorithm()]
    methods: list[str] = []
    keys: list[asyncssh.SSHKeyPair] = []
    if endpoint.private_key is not None:
        keys = list(
            asyncssh.load_keypairs(
                [parse_private_key(endpoint.private_key, endpoint.private_key_password)]
            )
        )
        methods.append("publickey")
    if endpoint.password is not None:
        methods += ["password", "keyboard-interactive"]
    agent = endpoint.agent_socket_path
    if agent is None:
        agent = os.environ.get("SSH_AUTH_SOCK") or None  # tryGetDefaultAgentSocket
    if agent is not None:
        agent_keys = await _agent_keys(agent, stack)
        keys = keys or agent_keys
        methods.append("publickey")
    options["preferred_auth"] = list(dict.fromkeys(methods))
    config = ClientConfig(options)

    def client() -> _Client:
        config.clients.append(_Client(keys, endpoint.password))
        return config.clients[-1]

    options["client_factory"] = client
    return config


async def _agent_keys(path: str, stack: contextlib.AsyncExitStack) -> list[asyncssh.SSHKeyPair]:
    """connection_unix.go `dialAgent` (`net.Dial("unix", path)`, its error returned as is) and
    `agent.NewClient(conn).Signers`; the agent stays connected for the signatures."""
    try:
        agent = await asyncssh.connect_agent(path)
    except OSError as error:
        raise SshError(f"dial unix {path}: connect: {_errno_text(error)}") from error
    stack.callback(agent.close)
    try:
        return list(await agent.get_keys())
    except (asyncssh.Error, OSError, ValueError):
        return []  # the signers' error only fails the auth method


# -- Dial ------------------------------------------------------------------------------------
async def dial(
    connection: Connection, log: Log, stack: contextlib.AsyncExitStack
) -> asyncssh.SSHClientConnection:
    """`Connection.Dial` (connection.go): straight to the host, or through the jump host
    ("Dial proxy", then "Dial from proxy" for the channel, then "Dial" for the handshake over
    it, each with its own retries and every error prefixed "proxy: "). What it opens is closed
    by `stack`."""
    target = connection.target
    config = await client_config(target, stack)
    if connection.proxy is None:
        client = await retry(log, "Dial", target.dial_error_limit, lambda: _dial(target, config))
    else:
        client = await _prefixed(_dial_via(connection.proxy, target, config, log, stack))
    stack.push_async_callback(_close, client)
    return client


async def _dial_via(
    proxy: Endpoint,
    target: Endpoint,
    config: ClientConfig,
    log: Log,
    stack: contextlib.AsyncExitStack,
) -> asyncssh.SSHClientConnection:
    proxy_config = await client_config(proxy, stack)
    jump = await retry(
        log, "Dial proxy", proxy.dial_error_limit, lambda: _dial(proxy, proxy_config)
    )
    stack.push_async_callback(_close, jump)
    sock = await retry(
        log, "Dial from proxy", target.dial_error_limit, lambda: _tunnel(jump, target, stack)
    )
    return await retry(
        log, "Dial", target.dial_error_limit, lambda: _handshake(sock, target, config)
    )


async def _prefixed(dialling: Awaitable[T]) -> T:
    try:
        return await dialling
    except SshError as error:
        raise SshError(f"proxy: {error}") from error


async def retry(log: Log, what: str, limit: int, attempt: Callable[[], Awaitable[T]]) -> T:
    """connection.go `dialWithRetry` on `retry.Until`: tries until one works, waiting 100 ms,
    x1.5 each time, at most 5 s; after `limit` failed retries (-1: never) the last error,
    "after N failed attempts: ERR". Each retry is announced as an info status line."""
    delay = RETRY_DELAY
    tries = 0
    while True:
        try:
            return await attempt()
        except SshError as error:
            dials = tries + 1
            if limit > DIAL_ERROR_UNLIMITED and dials > limit:  # reachedDialingErrorLimit
                raise SshError(f"after {tries} failed attempts: {error}") from error
            shown = "inf" if limit == DIAL_ERROR_UNLIMITED else str(limit)
            await log.info_status(f"{what} {dials}/{shown} failed: retrying")
        delay = min(delay, RETRY_MAX_DELAY)
        await asyncio.sleep(delay)
        delay *= RETRY_BACKOFF
        tries += 1


async def _dial(endpoint: Endpoint, config: ClientConfig) -> asyncssh.SSHClientConnection:
    """`ssh.Dial`: a TCP connection within the per-dial timeout, then the handshake."""
    return await _handshake(await _tcp(endpoint), endpoint, config)


async def _tcp(endpoint: Endpoint) -> socket.socket:
    """`net.DialTimeout("tcp", addr, config.Timeout)`: x/crypto's `ClientConfig.Timeout` bounds
    the TCP connect only (0: no bound); each resolved address is tried in turn, and an error
    names the address it was for (the first error, as Go's `dialSerial` returns)."""
    loop = asyncio.get_running_loop()
    tried = endpoint.address
    try:
        async with asyncio.timeout(endpoint.per_dial_timeout or None):
            found = await loop.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
            first: SshError | None = None
            for family, kind, proto, _, address in found:
                tried = Endpoint(str(address[0]), int(address[1])).address
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                try:
                    await loop.sock_connect(sock, address)
                except OSError as error:
                    sock.close()
                    first = first or SshError(f"dial tcp {tried}: connect: {_errno_text(error)}")
                    continue
                return sock
            raise first or SshError(f"dial tcp: lookup {endpoint.host}: no such host")
    except TimeoutError:
        raise SshError(f"dial tcp {tried}: i/o timeout") from None
    except socket.gaierror as error:
        raise SshError(f"dial tcp: lookup {endpoint.host}: no such host") from error


def _errno_text(error: OSError) -> str:
    """Go's `syscall.Errno` text: the C library's message, lower case."""
    return os.strerror(error.errno).lower() if error.errno else str(error)


async def _handshake(
    sock: socket.socket, endpoint: Endpoint, config: ClientConfig
) -> asyncssh.SSHClientConnection:
    """`ssh.NewClientConn`: key exchange, host key check, auth; "ssh: handshake failed: ..."."""
    try:
        return await asyncssh.connect(
            endpoint.host, endpoint.port, sock=sock, config=None, **config.options
        )
    except (asyncssh.Error, OSError) as error:
        sock.close()
        raise SshError(f"ssh: handshake failed: {_handshake_reason(error, config)}") from error


def _handshake_reason(error: Exception, config: ClientConfig) -> str:
    if isinstance(error, asyncssh.HostKeyNotVerifiable):
        return "ssh: host key mismatch"  # fixedHostKey.check
    if isinstance(error, asyncssh.PermissionDenied):
        tried = " ".join(config.tried())
        return f"ssh: unable to authenticate, attempted methods [{tried}], {NO_METHODS_LEFT}"
    if isinstance(error, asyncssh.ConnectionLost | ConnectionResetError | BrokenPipeError):
        return "EOF"
    return str(error)


async def _tunnel(
    jump: asyncssh.SSHClientConnection, target: Endpoint, stack: contextlib.AsyncExitStack
) -> socket.socket:
    """`proxyClient.Dial("tcp", endpoint)`: a direct-tcpip channel from the jump host, bridged
    to a socket pair whose other end is the `net.Conn` the handshake runs over."""
    try:
        reader, writer = await jump.open_connection(target.host, target.port)
    except asyncssh.ChannelOpenError as error:
        reason = REJECTIONS.get(error.code, f"unknown reason {error.code}")
        raise SshError(f"ssh: rejected: {reason} ({error.reason})") from error
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    pumps = [
        asyncio.create_task(_from_channel(reader, ours)),
        asyncio.create_task(_to_channel(ours, writer)),
    ]

    async def stop() -> None:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        writer.close()
        ours.close()

    stack.push_async_callback(stop)
    return theirs


async def _from_channel(reader: asyncssh.SSHReader[bytes], sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await reader.read(65536):
            await loop.sock_sendall(sock, data)
        sock.shutdown(socket.SHUT_WR)


async def _to_channel(sock: socket.socket, writer: asyncssh.SSHWriter[bytes]) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await loop.sock_recv(sock, 65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()


async def _close(client: asyncssh.SSHClientConnection) -> None:
    client.close()
    with contextlib.suppress(asyncssh.Error, OSError):
        await client.wait_closed()


# -- run -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """What `CommandOutputs.run` (commandOutputs.go) reads: the command, and the resource's
    inputs and previous outputs around it."""

    command: str
    connection: Connection
    environment: Mapping[str, str] = field(default_factory=dict)
    add_previous_output_in_env: bool = True
    previous_stdout: str = ""
    previous_stderr: str = ""
    stdin: str = ""
    logging: str | None = None  # logging.go: unset logs both streams

    @property
    def log_stdout(self) -> bool:
        return self.logging in (None, "stdout", "stdoutAndStderr")  # `ShouldLogStdout`

    @property
    def log_stderr(self) -> bool:
        return self.logging in (None, "stderr", "stdoutAndStderr")  # `ShouldLogStderr`

    def setenv(self) -> list[tuple[str, str, bool]]:
        """(name, value, must succeed): the `environment` (a refusal fails the command), then
        the previous stdout and stderr when set and `addPreviousOutputInEnv` allows (a refusal
        only warns). Go walks the map in random order; here it is sorted."""
        plan = [(name, value, True) for name, value in sorted(self.environment.items())]
        if self.add_previous_output_in_env:
            for name, value in ((PULUMI_COMMAND_STDOUT, self.previous_stdout),
                                (PULUMI_COMMAND_STDERR, self.previous_stderr)):  # fmt: skip
                if value:
                    plan.append((name, value, False))
        return plan


async def run(job: Job, log: Log) -> tuple[str, str]:
    """`CommandOutputs.run`: dial, open a session, set its environment, feed stdin (only when
    non-empty, then EOF), run the command; stdout and stderr come back with one trailing newline
    trimmed. Each line of the logged streams goes to the engine as an info status line as it
    comes. The dial's and `NewSession`'s errors come back as they are, `Setenv`'s as
    `logAndWrapSetenvErr` words them; every error of `session.Run` (its start, the exit, a lost
    connection) is `"%w: running %q:\\n%s"`: x/crypto's error, the command quoted as Go quotes
    it, and both streams interleaved."""
    async with contextlib.AsyncExitStack() as stack:
        client = await dial(job.connection, log, stack)
        lines = LogLines(log)
        stack.callback(lines.cancel)
        capture = Capture(lines, job.log_stdout, job.log_stderr)
        channel = _SetenvChannel(client, job.setenv(), log)
        stack.callback(channel.close)
        failure = await _session_run(channel, capture, job)
        await lines.close()
    if failure is not None:
        output = capture.both.decode(errors="replace")
        raise SshError(f"{failure}: running {go_quote(job.command)}:\n{output}")
    return _trimmed(capture.stdout), _trimmed(capture.stderr)


async def _session_run(channel: _SetenvChannel, capture: Capture, job: Job) -> str | None:
    """`client.NewSession()`, the `Setenv`s, then `session.Run` (session.go `Start`, then
    `Wait`): the error `Run` returns, or None. `Start`'s error is the refused exec ("ssh: command
    X failed") or "EOF" when the channel is gone; `Wait`'s is the exit's (`exit_error`), else
    the stdin copy's ("EOF": the channel closed before stdin was written)."""
    started = await channel.start(capture, job.command)
    if started is not None:
        return started
    copy_error = None
    try:
        if job.stdin:
            channel.write(job.stdin.encode())
        channel.write_eof()
    except (asyncssh.Error, OSError):
        copy_error = "EOF"
    await channel.wait_closed()  # a lost connection closes it too, without an exit status
    return exit_error(channel.exit_status, channel.get_exit_signal()) or copy_error


def _trimmed(data: bytearray) -> str:
    return data.decode(errors="replace").removesuffix("\n")  # strings.TrimSuffix(s, "\n")


class _ChannelGone(Exception):
    """A channel request found the channel closed (x/crypto channel.go `SendRequest`: io.EOF)."""


class _SetenvChannel(asyncssh.SSHClientChannel[bytes]):
    """`client.NewSession()` then `session.Setenv` for each variable, then `session.Start`: the
    "env" requests go with want_reply true, each answered before the next, and a refusal of a
    variable that must be set fails the command with `logAndWrapSetenvErr`'s error (an error
    log line first); a refusal of a previous output is a warning only. The exit status and
    signal are kept as x/crypto's session.go `wait` reads them: both may come (asyncssh takes
    only one), the status whole (asyncssh keeps its low byte)."""

    def __init__(
        self,
        conn: asyncssh.SSHClientConnection,
        setenv: Sequence[tuple[str, str, bool]],
        log: Log,
    ) -> None:
        super().__init__(conn, asyncio.get_running_loop(), "strict", None, "strict", WINDOW,
                         MAX_PACKET)  # fmt: skip
        self._setenv = list(setenv)
        self._log = log
        self._starting = False
        self.exit_status: int | None = None

    async def start(self, capture: Capture, command: str) -> str | None:
        """Open the session, set the environment, start `command`: `NewSession`'s and
        `Setenv`'s errors raised, `Start`'s returned (None when it started)."""
        try:
            await self.create(lambda: capture, command, None, {}, False, None, None, {}, False,
                              None, None, False, False)  # fmt: skip
        except _ChannelGone:
            return "EOF"
        except asyncssh.ChannelOpenError as error:
            if self._starting and error.code == asyncssh.OPEN_REQUEST_SESSION_FAILED:
                return f"ssh: command {command} failed"
            reason = REJECTIONS.get(error.code, f"unknown reason {error.code}")
            raise SshError(f"ssh: rejected: {reason} ({error.reason})") from error
        except (asyncssh.Error, OSError) as error:
            if self._starting:
                return "EOF"
            raise SshError("EOF") from error  # the connection went before the session opened
        return None

    async def _open(self, chantype: bytes, *args: bytes) -> SSHPacket:
        packet = await super()._open(chantype, *args)
        for name, value, required in self._setenv:
            try:
                if not await self._make_request(b"env", String(name), String(value)):
                    await self._refused(name, required, "ssh: setenv failed")
            except _ChannelGone:
                await self._refused(name, required, "EOF")
        return packet

    async def _refused(self, name: str, required: bool, reason: str) -> None:
        if not required:
            await self._log.warning(SETENV_HINT.format(name))
            return
        await self._log.error(SETENV_HINT.format(name))
        raise SshError(f"could not set environment variable {go_quote(name)}: {reason}")

    async def _make_request(self, request: bytes, *args: bytes) -> bool | None:
        """channel.go `SendRequest` with want_reply: True or False as answered, `_ChannelGone`
        when the channel is closed, before or while waiting (asyncssh answers False then, or
        raises the connection's error)."""
        if request in (b"exec", b"shell"):
            self._starting = True
        if request == b"shell":  # asyncssh asks for a shell for "", x/crypto execs ""
            request, args = b"exec", (String(""),)
        if self._send_chan is None:
            raise _ChannelGone
        try:
            answer = await super()._make_request(request, *args)
        except (asyncssh.Error, OSError) as error:
            raise _ChannelGone from error
        if not answer and self._send_chan is None:
            raise _ChannelGone
        return answer

    def _process_exit_status_request(self, packet: SSHPacket) -> bool:
        """session.go `wait`: "exit-status" sets the status (a later one wins)."""
        self.exit_status = packet.get_uint32()
        return True

    def _process_exit_signal_request(self, packet: SSHPacket) -> bool:
        """session.go `wait`: "exit-signal" sets the signal, its message and language."""
        name, core = packet.get_string().decode(errors="replace"), packet.get_boolean()
        message = packet.get_string().decode(errors="replace")
        self._exit_signal = (name, core, message, packet.get_string().decode(errors="replace"))
        return True


class Capture(asyncssh.SSHClientSession[bytes]):
    """The session's `Stdout`/`Stderr` multi-writers: each stream's own buffer, both streams
    in arrival order (`stdouterrbuf`), and the logged ones to the line logger."""

    def __init__(self, lines: LogLines, log_stdout: bool, log_stderr: bool) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.both = bytearray()
        self._lines = lines
        self._logged = {False: log_stdout, True: log_stderr}

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        is_stderr = datatype == asyncssh.EXTENDED_DATA_STDERR
        (self.stderr if is_stderr else self.stdout).extend(data)
        self.both.extend(data)
        if self._logged[is_stderr]:
            self._lines.feed(data)


class LogLines:
    """util.go `LogOutput`: a `bufio.Scanner` over the logged output, each line (split at "\\n",
    a trailing "\\r" dropped, the last one even without "\\n") sent as an info status line, in
    order, while the command runs."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self._buffer = bytearray()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._sender = asyncio.create_task(self._send())
        self._stopped = False

    def feed(self, data: bytes) -> None:
        if self._stopped:
            return
        self._buffer.extend(data)
        while (end := self._buffer.find(b"\n")) >= 0:
            self._emit(bytes(self._buffer[:end]))
            del self._buffer[: end + 1]
        if len(self._buffer) >= MAX_LOG_LINE:
            self._stopped = True  # bufio.ErrTooLong ends the scan

    async def close(self) -> None:
        """The writer's `Close` and `<-stdouterrch`: the last line, then all of them sent."""
        if self._buffer and not self._stopped:
            self._emit(bytes(self._buffer))
        self._buffer.clear()
        self._queue.put_nowait(None)
        await self._sender

    def cancel(self) -> None:
        """A command that never ran: nothing more to send."""
        self._sender.cancel()

    def _emit(self, line: bytes) -> None:
        if len(line) >= MAX_LOG_LINE:
            self._stopped = True
            return
        self._queue.put_nowait(line.removesuffix(b"\r").decode(errors="replace"))

    async def _send(self) -> None:
        while (line := await self._queue.get()) is not None:
            await self._log.info_status(line)


def exit_error(status: int | None, signal: tuple[str, bool, str, str] | None) -> str | None:
    """x/crypto session.go `wait`: None for status 0; without a status, `ExitMissingError`
    unless a signal came, whose status is then 128+N; otherwise `ExitError` ("Process exited
    with status N", " from signal NAME" when one came, ". Reason was: MSG" when it had one).
    A status sent along with a signal is the one reported."""
    if status == 0:
        return None
    name, message = (signal[0], signal[2]) if signal is not None else ("", "")
    if status is None:
        if not name:
            return "wait: remote command exited without exit status or exit signal"
        status = 128 + SIGNALS.get(name, 0)
    text = f"Process exited with status {status}"
    if name:
        text += f" from signal {name}"
    return f"{text}. Reason was: {message}" if message else text
