"""Loopback fake of the GCE metadata server's service-account token endpoint.

The on-VM fetch script asks `http://$GCE_METADATA_HOST/computeMetadata/v1/instance/
service-accounts/default/token` for its identity's access token, as google-auth does. The real
server refuses requests without `Metadata-Flavor: Google` (a guard against SSRF); so does this.

`unavailable_for = N` answers the first N token requests with 503: the GKE metadata server is
not ready in a pod's first seconds (GKE docs, Workload Identity Federation for GKE, limitations,
which advise a retry; users' reports: r-lib/gargle#186, googleapis/google-auth-library-python
#1261). What exactly it answers then is not documented; a 5xx and a refused connection are the
cases a client must retry.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fakes.loopback import LoopbackHttpServer, send_json

TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


class FakeMetadataServer(LoopbackHttpServer):
    """Serves one access token; counts requests and those that lacked the flavor header."""

    thread_name = "fake-metadata-server"

    def __init__(self, access_token: str = "test-token") -> None:
        super().__init__()
        self.access_token = access_token
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.unavailable_for = 0
        self.refused = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append((self.path, headers))
                if headers.get("metadata-flavor") != "Google":
                    self._answer(403, {"error": "Missing Metadata-Flavor:Google header."})
                elif self.path.split("?")[0] != TOKEN_PATH:
                    self._answer(404, {"error": "not found"})
                elif fake.refused < fake.unavailable_for:
                    fake.refused += 1
                    self._answer(503, {"error": "the metadata server is not ready yet"})
                else:
                    body = {"access_token": fake.access_token, "expires_in": 3599}
                    self._answer(200, {**body, "token_type": "Bearer"})

            def _answer(self, status: int, body: dict[str, object]) -> None:
                send_json(self, status, body, headers={"Metadata-Flavor": "Google"})

            def log_message(self, *_args: object) -> None:
                return

        self._handler = Handler

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, the form `GCE_METADATA_HOST` takes."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> FakeMetadataServer:
        return self._serve(ThreadingHTTPServer(("127.0.0.1", 0), self._handler))


@pytest.fixture
def fake_metadata() -> Iterator[FakeMetadataServer]:
    server = FakeMetadataServer().start()
    try:
        yield server
    finally:
        server.stop()
