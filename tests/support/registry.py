"""A real OCI registry on loopback, behind a Docker Hub-style token service, for the image pin.

The registry is the distribution project's (`github.com/distribution/distribution/v3`
cmd/registry, v3.1.2), built by scripts/engine/build.sh; test images are pushed with
go-containerregistry's `crane`, built beside it: both are the real programs, so the digests the
tests compare come from a real client and a real server.

The token service is the one stand-in. It follows Docker's "Token Authentication Specification"
(docs.docker.com/registry/spec/auth/token/) as Docker Hub's auth.docker.io serves it:
`GET /token?service=S&scope=repository:NAME:ACTIONS` without credentials gives an anonymous
token (pull, on a public repository); the answer is
`{"token", "access_token", "expires_in", "issued_at"}`, and a scope it does not grant is left out
of the token's `access` (the registry then answers 401), as Docker Hub does for a private or
missing repository. The token is a JWT the registry verifies as its token access controller
does (distribution registry/auth/token/token.go `Verify`, `VerifySigningKey`): ES256, an `x5c`
header whose certificate is in the registry's `rootcertbundle`, `iss` = its `issuer`, `aud` =
its `service`, `nbf`/`exp` in range, and `access` listing the granted actions.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tests.support import engine

SERVICE = "registry.docker.io"  # what Docker Hub's challenge names
ISSUER = "tpu-vllm-test-token-service"
#: Repositories anonymous tokens may not pull (Docker Hub: private ones).
PRIVATE_PREFIX = "private/"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenService:
    """auth.docker.io's token endpoint, on loopback; `requests` records who asked for what."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: When set, every token request is answered with this status (a refusing token service).
    refuse_with: int | None = None
    #: When set, every token request is redirected there (302, `Location`).
    redirect_to: str | None = None

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/token"

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(url.query)
        auth = handler.headers.get("Authorization", "")
        self.requests.append({"query": query, "authorization": auth})
        if auth:  # the lookup never sends credentials; this service has no users
            return self._send(handler, 401, {"details": "incorrect username or password"})
        if url.path != "/token":
            return self._send(handler, 404, {"details": "not found"})
        if self.redirect_to is not None:
            handler.send_response(302)
            handler.send_header("Location", self.redirect_to)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return None
        if self.refuse_with is not None:
            return self._send(handler, self.refuse_with, {"details": "access to the token refused"})
        access = []
        for scope in query.get("scope", []):
            for one in scope.split(" "):
                kind, _, rest = one.partition(":")
                name, _, actions = rest.rpartition(":")
                granted = [a for a in actions.split(",") if a == "pull"]
                if kind == "repository" and name.startswith(PRIVATE_PREFIX):
                    granted = []
                if granted:
                    access.append({"type": kind, "name": name, "actions": granted})
        token = self.token(query.get("service", [""])[0], "anonymous", access)
        issued = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"token": token, "access_token": token, "expires_in": 300, "issued_at": issued}
        self._send(handler, 200, body)

    def token(self, audience: str, subject: str, access: list[dict[str, Any]]) -> str:
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": subject,
            "aud": audience,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": _b64url(os.urandom(12)),
            "access": access,
        }
        signing_input = ".".join(
            _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        r, s = decode_dss_signature(
            self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        )
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")  # JWS ES256: R || S
        return f"{signing_input}.{_b64url(signature)}"

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """Two `registry serve` processes on 127.0.0.1 over one storage directory: the one the
    tests resolve against, with token auth (`url`), and an open one `crane` pushes to and reads
    from (`push_host`). crane (go-containerregistry pkg/v1/remote/transport/bearer.go
    `validateRealmURL`) refuses a token realm on a private or loopback address unless it is the
    registry's own host:port, so it cannot use a loopback token service on a port of its own;
    the storage is the same, so what crane pushed is what the authenticated registry serves."""

    def __init__(self, work: Path, *, realm: str | None = None) -> None:
        tools = engine.tools()
        tools.require("registry", "crane")
        self.bin = tools.bin_dir
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.tokens = TokenService()
        (work / "token-ca.pem").write_bytes(self.tokens.cert_pem())
        self.env = {**os.environ, "NO_PROXY": "127.0.0.1", "DOCKER_CONFIG": str(work / "docker")}
        self.log = (work / "registry.log").open("wb")
        self.processes: list[subprocess.Popen[bytes]] = []
        auth = {
            "token": {
                "realm": realm or self.tokens.realm,
                "service": SERVICE,
                "issuer": ISSUER,
                "rootcertbundle": str(work / "token-ca.pem"),
            }
        }
        started = time.monotonic()
        try:
            self.port = self._serve("auth", auth)
            self.push_port = self._serve("open", None)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _serve(self, name: str, auth: dict[str, Any] | None) -> int:
        port = _free_port()
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.work / "data")}},
            "http": {"addr": f"127.0.0.1:{port}", "secret": "one-secret-for-both-processes"},
        }
        if auth:
            config["auth"] = auth
        path = self.work / f"{name}.yml"
        path.write_text(json.dumps(config))  # JSON is YAML
        process = subprocess.Popen(
            [str(self.bin / "registry"), "serve", str(path)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self.processes.append(process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return port
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(f"registry {name} exited: {self.log_text()}") from None
                time.sleep(0.05)
        raise RuntimeError(f"registry {name} did not listen in 30 s: {self.log_text()}")

    @property
    def push_host(self) -> str:
        return f"127.0.0.1:{self.push_port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def log_text(self) -> str:
        self.log.flush()
        return (self.work / "registry.log").read_text(errors="replace")[-3000:]

    def crane(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / "crane"), "--insecure", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"crane {' '.join(args)}: {done.stderr}"
        return done.stdout.strip()

    def push(self, repository: str, tag: str, content: str, *, oci: bool = False) -> str:
        """An image of one small layer holding `content`; returns its digest (crane's)."""
        layer_dir = self.work / "layers" / _b64url(os.urandom(6))
        layer_dir.mkdir(parents=True)
        (layer_dir / "hello.txt").write_text(content)
        tarball = layer_dir.with_suffix(".tar")
        subprocess.run(["tar", "-cf", str(tarball), "-C", str(layer_dir), "."], check=True)
        ref = f"{self.push_host}/{repository}:{tag}"
        flags = ["--oci-empty-base"] if oci else []
        self.crane("append", *flags, "-f", str(tarball), "-t", ref)
        return self.digest(repository, tag)

    def push_index(self, repository: str, tag: str, *manifests: str) -> str:
        """An OCI image index (multi-platform) of the given tags; returns its digest."""
        refs = [arg for m in manifests for arg in ("-m", f"{self.push_host}/{repository}:{m}")]
        self.crane("index", "append", *refs, "-t", f"{self.push_host}/{repository}:{tag}")
        return self.digest(repository, tag)

    def digest(self, repository: str, tag: str) -> str:
        return self.crane("digest", f"{self.push_host}/{repository}:{tag}")

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()
        self.tokens.stop()
