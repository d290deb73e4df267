"""The part every loopback HTTP fake shares: serve on 127.0.0.1 in a thread, stop cleanly.

Each fake (TPU API, Secret Manager, metadata server, OpenAI-compatible server) builds its own
`http.server` and hands it to `_serve`; this class owns the thread, the shutdown and the URL,
so no fake can leave a listening socket behind or bind anything but loopback.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on now, on loopback: for a server a test starts that cannot be
    handed a socket (sshd, a fake VM's vLLM)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: Any,
    *,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer a request with a JSON body, as the Google APIs the fakes stand in for do."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class LoopbackHttpServer:
    """Base of the fakes: `start()` builds a server and calls `_serve`; `stop()` ends it."""

    thread_name = "loopback-fake"

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def _serve(self, server: ThreadingHTTPServer) -> Self:
        bound = str(server.server_address[0])
        if bound != HOST:
            raise ValueError(f"a fake may only listen on {HOST}, not {bound}")
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll interval
            name=self.thread_name,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (safe to call twice)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._server is None:
            raise RuntimeError(f"{self.thread_name} is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, no trailing slash."""
        return f"http://{HOST}:{self.port}"
