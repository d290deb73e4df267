"""A network namespace per fake VM, and TCP relays between it and the test machine's loopback.

Why: a TPU VM is a host of its own. Its `127.0.0.1` is its own loopback, where vLLM (started
with `--net=host`, listening on every address) answers the readiness check
(scripts/remote/wait_ready.py asks `http://127.0.0.1:PORT`), while clients reach the same
server at the node's external IP. Two nodes of one stack (a renewal runs the successor beside
the node it replaces) serve on the same `vllm.port`. On one test machine that only holds if
each fake VM has its own loopback: its sshd and everything its sessions start run in a network
namespace of their own (network_namespaces(7)), and relays join it to the machine's loopback:

* inbound: `127.0.0.N:22` and `127.0.0.N:PORT` on the machine (N picked per VM: the node's
  external IP) lead to the VM's own `127.0.0.1:22` / `127.0.0.1:PORT`;
* outbound: the loopback fakes the VM calls (metadata server, Secret Manager, Cloud Storage),
  at `127.0.0.1:M` on the machine, answer at the same `127.0.0.1:M` inside the VM.

A relay's socket lives in the namespace it was created in, whichever thread uses it later
(socket(7) sockets keep their namespace); setns(2) with CLONE_NEWNET moves only the calling
thread, so a short-lived thread enters the VM's namespace, creates the socket and ends.
Needs root (CAP_SYS_ADMIN) for setns and `unshare --net`.

A relay accepts before it knows whether the VM side listens; when it does not (vLLM still
loading, or the VM is gone), the accepted connection is reset at once, which a client sees as
a failed request just as it would a refused connection.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Callable

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
BUFFER = 65536


def socket_in(netns_fd: int | None) -> socket.socket:
    """A TCP socket in the network namespace `netns_fd` (an fd of /proc/PID/ns/net), or in
    this process's own when None."""
    if netns_fd is None:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    made: list[socket.socket] = []
    failed: list[int] = []

    def enter() -> None:
        if _libc.setns(netns_fd, CLONE_NEWNET) != 0:
            failed.append(ctypes.get_errno())
            return
        made.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))

    thread = threading.Thread(target=enter, name="netns-socket", daemon=True)
    thread.start()
    thread.join()
    if failed or not made:
        code = failed[0] if failed else 0
        raise OSError(code, f"setns(CLONE_NEWNET) failed: {os.strerror(code)}")
    return made[0]


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a refused or torn connection looks to a client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def _pump(source: socket.socket, sink: socket.socket, done: Callable[[], None]) -> None:
    try:
        while True:
            data = source.recv(BUFFER)
            if not data:
                break
            sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        done()


class Relay:
    """Listen at `listen` in one namespace; join each connection to `target` in another."""

    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        *,
        listen_ns: int | None = None,
        target_ns: int | None = None,
    ) -> None:
        self.listen = listen
        self.target = target
        self._target_ns = target_ns
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        server = socket_in(listen_ns)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(listen)
            server.listen(64)
        except OSError:
            server.close()
            raise
        self._server = server
        self._thread = threading.Thread(target=self._accept, name=f"relay-{listen}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        try:
            upstream = socket_in(self._target_ns)
            upstream.settimeout(10)
            upstream.connect(self.target)
            upstream.settimeout(None)
        except OSError:
            _reset(client)
            return
        with self._lock:
            if self._stopped.is_set():
                _reset(client)
                _reset(upstream)
                return
            self._open.update((client, upstream))
        left = [2]

        def done() -> None:
            with self._lock:
                left[0] -= 1
                if left[0]:
                    return
                self._open.difference_update((client, upstream))
            client.close()
            upstream.close()

        threading.Thread(target=_pump, args=(client, upstream, done), daemon=True).start()
        threading.Thread(target=_pump, args=(upstream, client, done), daemon=True).start()

    def stop(self) -> None:
        """Stop listening and reset every joined connection (the VM went away)."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _reset(sock)
        self._thread.join(timeout=5)
