"""Loopback fake of the GCE metadata server's service-account token endpoint.

The on-VM fetch script asks `http://$GCE_METADATA_HOST/computeMetadata/v1/instance/
service-accounts/default/token` for its identity's access token, as google-auth does. The real
server refuses requests without `Metadata-Flavor: Google` (a guard against SSRF); so does this.

The GKE metadata server is not ready in a pod's first seconds (GKE docs, Workload Identity
Federation for GKE, limitations, which advise a retry). It is closed source; what it does then
comes from users' reports, and each is a knob here, counted over token requests:
- `unavailable_for = N`: 503 (a 5xx, r-lib/gargle#186);
- `not_found_for = N`: 404 with the body `Not Found` (googleapis/google-auth-library-python#745,
  where the maintainer names the metadata server's start-up delay as the cause);
- `closed_for = N`: the connection closed without an answer;
- `start(refuse_for=S)`: for S seconds nothing listens on the (bound) port, so connections are
  refused (google-auth-library-python#1261: "the GKE metadata server is not ready & the
  connections are being refused").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.fakes.loopback import LoopbackHttpServer, send_json

TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


class FakeMetadataServer(LoopbackHttpServer):
    """Serves one access token; counts requests and those that lacked the flavor header."""

    thread_name = "fake-metadata-server"

    def __init__(self, access_token: str = "test-token") -> None:
        super().__init__()
        self.access_token = access_token
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.unavailable_for = 0
        self.not_found_for = 0
        self.closed_for = 0
        #: Token requests answered with something other than a token (503, 404 or a close).
        self.refused = 0
        self._listen_later: threading.Timer | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append((self.path, headers))
                if headers.get("metadata-flavor") != "Google":
                    self._answer(403, {"error": "Missing Metadata-Flavor:Google header."})
                elif self.path.split("?")[0] != TOKEN_PATH:
                    self._answer(404, {"error": "not found"})
                elif fake.refused < fake.closed_for:
                    fake.refused += 1
                    self.close_connection = True  # no status line: the client sees a reset
                elif fake.refused < fake.closed_for + fake.not_found_for:
                    fake.refused += 1
                    self._answer_text(404, "Not Found\n")
                elif fake.refused < fake.closed_for + fake.not_found_for + fake.unavailable_for:
                    fake.refused += 1
                    self._answer(503, {"error": "the metadata server is not ready yet"})
                else:
                    body = {"access_token": fake.access_token, "expires_in": 3599}
                    self._answer(200, {**body, "token_type": "Bearer"})

            def _answer(self, status: int, body: dict[str, object]) -> None:
                send_json(self, status, body, headers={"Metadata-Flavor": "Google"})

            def _answer_text(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: object) -> None:
                return

        self._handler = Handler

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, the form `GCE_METADATA_HOST` takes."""
        return f"127.0.0.1:{self.port}"

    def start(self, refuse_for: float = 0.0) -> FakeMetadataServer:
        """Serve; with `refuse_for`, bind the port now (so `host` is known) but listen only
        after that many seconds: until then the kernel refuses connections (ECONNREFUSED)."""
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler, bind_and_activate=False)
        server.server_bind()
        if refuse_for <= 0:
            server.server_activate()
            return self._serve(server)
        self._server = server  # bound, not listening: `port` works, connections are refused

        def listen() -> None:
            server.server_activate()
            self._serve(server)

        self._listen_later = threading.Timer(refuse_for, listen)
        self._listen_later.start()
        return self

    def stop(self) -> None:
        if self._listen_later is not None:
            self._listen_later.cancel()
            self._listen_later.join()
            self._listen_later = None
        if self._server is not None and self._thread is None:  # never listened: just close
            self._server.server_close()
            self._server = None
        super().stop()


@pytest.fixture
def fake_metadata() -> Iterator[FakeMetadataServer]:
    server = FakeMetadataServer().start()
    try:
        yield server
    finally:
        server.stop()
