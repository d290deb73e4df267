"""The privileged half of the fake TPU VM: what real root does there, for file ownership only.

Why: on a TPU VM two things run as root that the SSH user does not: the server container
(tpu-inference's `docker/Dockerfile` has no `USER`, so JAX writes the compile cache, and creates
its directory, as root: jax/_src/lru_cache.py `self.path.mkdir(parents=True, exist_ok=True)`,
`cache_path.write_bytes(...)`), and `sudo` (the guest agent gives `ssh-keys` users NOPASSWD
sudo: GoogleCloudPlatform/guest-agent `non_windows_accounts.go`). The fake docker and fake sudo
run as the SSH user, so without this every file the "container" wrote would be the user's, and
a restore that cannot write into a root-owned cache directory would pass here and fail on a VM.

When the tests run as root (the harness then creates a dedicated, unprivileged SSH user), each
SshHost starts one RootHelper: a Unix socket, connectable only by that user (mode 0600, and
SO_PEERCRED checked), served by a thread of the test process, which is root. It does two things:
- ``write``: write one file as root (directories created 0755, the file 0644: what a root
  process with the default umask 022 creates). The fake container writes its cache entries so.
- ``exec``: run a file-ownership command (``chown``, ``mkdir``, ... see ``ROOT_HELPER_TOOLS``) as
  root with the caller's stdin/stdout/stderr (passed over the socket), for the fake ``sudo``.
  Everything else under the fake sudo (``docker`` included: the fake daemon's state is the
  user's) still runs as the SSH user.
Both refuse any path outside the SshHost's own directory, so a test can never change the
machine it runs on. The client side is in fake_docker.py (``root_helper_request``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.support.fakes.fake_docker import ROOT_HELPER_SOCKET, ROOT_HELPER_TOOLS

__all__ = ["ROOT_HELPER_SOCKET", "RootHelper"]
_HEADER = struct.Struct(">Q")


def read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One length-prefixed JSON request and the descriptors sent with its first bytes."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _HEADER.size:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("short request")
        data += more
    (length,) = _HEADER.unpack(data[: _HEADER.size])
    body = data[_HEADER.size :]
    while len(body) < length:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("short request")
        body += more
    return dict(json.loads(body)), list(fds)


class RootHelper:
    """Serves ``write`` and ``exec`` requests from one uid, confined to one directory."""

    def __init__(self, socket_path: Path, uid: int, gid: int, confine: Path) -> None:
        self.socket_path = socket_path
        self.uid = uid
        self.gid = gid
        self.confine = Path(os.path.realpath(confine))
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def start(self) -> RootHelper:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        os.chown(self.socket_path, self.uid, self.gid)
        sock.listen(16)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="fake-root-helper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def inside(self, path: str, cwd: str | None = None) -> bool:
        full = os.path.realpath(os.path.join(cwd or str(self.confine), path))
        return full == str(self.confine) or full.startswith(str(self.confine) + os.sep)

    def _serve(self, conn: socket.socket) -> None:
        fds: list[int] = []
        with conn:
            try:
                size = struct.calcsize("3i")
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
                _pid, uid, _gid = struct.unpack("3i", creds)
                if uid != self.uid:
                    return
                request, fds = read_request(conn)
                answer = self._handle(request, fds)
            except Exception as error:  # noqa: BLE001 - answered to the caller, never raised here
                answer = {"error": f"{type(error).__name__}: {error}"}
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(answer).encode())

    def _handle(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        if request.get("op") == "write":
            return self._write(str(request["path"]), base64.b64decode(request["data"]))
        if request.get("op") == "exec":
            return self._exec(request, fds)
        return {"error": f"unknown op {request.get('op')!r}"}

    def _write(self, path: str, data: bytes) -> dict[str, Any]:
        if not os.path.isabs(path) or not self.inside(path):
            return {"error": f"refused: {path} is outside {self.confine}"}
        folder = os.path.dirname(path)
        missing = []
        while not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for new in reversed(missing):
            os.mkdir(new, 0o755)
            os.chmod(new, 0o755)  # noqa: S103 - what root with umask 022 creates
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.root-helper")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(data)
        os.replace(tmp, path)
        return {"ok": True}

    def _exec(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        argv = [str(a) for a in request.get("argv") or []]
        cwd = str(request.get("cwd") or "")
        if (
            len(fds) != 3
            or not argv
            or os.path.basename(argv[0]) not in ROOT_HELPER_TOOLS
            or not (cwd and self.inside(cwd))
            or any("/" in a and not a.startswith("-") and not self.inside(a, cwd) for a in argv[1:])
        ):
            return {"privileged": False}
        done = subprocess.run(
            argv,
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            env={str(k): str(v) for k, v in (request.get("env") or {}).items()},
            cwd=cwd,
            umask=0o022,
            check=False,
            timeout=120,
        )
        return {"privileged": True, "code": done.returncode}
