"""A real OpenSSH server on 127.0.0.1 that stands in for the TPU VM in tests.

Why: ``pulumi_command.remote.Command`` sends its command text as one SSH ``exec`` request to the
remote user's login shell. Quoting, ``~`` expansion, ``sudo``, stdin handling and processes that
must outlive the session are exactly what breaks on a real VM, and a mock cannot show any of it.
So each test gets its own ``/usr/sbin/sshd`` on a free loopback port, with a fresh ed25519 host key
(pinned by the client, like ``host_key`` in the Pulumi connection), key-only login, and a fake
``docker``/``sudo`` first on the remote ``PATH`` (see ``fake_docker.py``).

Isolation: OpenSSH 9.2's ``SetEnv HOME=...`` does override ``HOME`` for the session, but sshd
still ``chdir``s to the passwd home before running the command, so relative paths would land in
``/root``. When the tests run as root (CI), every host therefore gets a dedicated, unprivileged
user (``useradd``) whose passwd home is a fresh temporary directory: ``HOME`` and the working
directory are both isolated and, like on the TPU VM, docker needs ``sudo``. Without root the
current user is used with ``SetEnv HOME=...`` (the working directory is then the real home).

Per-test environment (e.g. ``GCE_METADATA_HOST=127.0.0.1:PORT``) goes into sshd's ``SetEnv`` at
start, never through ``AcceptEnv``/client-side ``SendEnv`` (pulumi-command's ``environment``
needs ``AcceptEnv`` on the VM; the project must not rely on it).

Root: when the tests run as root, each host also gets a root helper (``root_helper.py``): the
fake container then writes its XLA cache as root, and the fake ``sudo`` runs file-ownership
commands (``chown``, ``mkdir``, ...) as real root, inside the host's own directory only, as the
image (no ``USER``) and NOPASSWD sudo do on a TPU VM. ``SshHost.root_modelled`` says whether.

The guest agent's account window: on a real node sshd is up before the guest agent has created
the ``ssh-keys`` user. GoogleCloudPlatform/guest-agent ``non_windows_accounts.go``
(``accountsMgr.Set``) runs ``createGoogleUser`` (``useradd``) for a metadata user that has no
passwd entry, and only then ``updateAuthorizedKeysFile`` writes its keys; until both are done
sshd refuses the key ("Permission denied (publickey)", the same answer it gives for an unknown
user). ``user_created_after=SECONDS`` (or ``None`` with ``create_user()`` called by the test)
models that: the authorized keys are installed only then, so authentication fails before.

Use ``ssh_host`` for defaults or ``ssh_host_factory(env=..., images_present=...)``; register the
fixtures with ``pytest_plugins = ("tests.support.fakes.ssh_host",)`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypedDict

import pytest

from . import fake_docker
from .root_helper import RootHelper

SSHD = "/usr/sbin/sshd"
HOST = "127.0.0.1"
SUPPORT_DIR = Path(__file__).resolve().parent.parent
FAKES_DIR = SUPPORT_DIR / "fakes"
FIXTURES_DIR = SUPPORT_DIR / "fixtures"
# sshd's default PATH for a non-root user on Debian (_PATH_STDPATH), behind the fake bin dir.
USER_PATH_TAIL = "/usr/local/bin:/usr/bin:/bin:/usr/games"
SUDO_SECURE_PATH = fake_docker.SUDO_SECURE_PATH
APT_HINT = "apt-get update && apt-get install -y openssh-server"


class _ScenarioRequired(TypedDict):
    log: str


class Scenario(_ScenarioRequired, total=False):
    """What the next fake ``docker run`` replays (written to ``<state>/scenario.json``).

    ``log``: file in ``tests/support/fixtures/vllm_logs`` (or an absolute path).
    ``speed``: fixture seconds per wall-clock second (2000 turns an 857 s boot into 0.43 s).
    ``exit_at``: fixture time at which the container dies silently; ``exit_code`` (default 137).
    ``restart_log``: log replayed after a restart (default: ``log``).
    ``health_status``: what ``GET /health`` answers once the server listens (default 200; 503
    is vLLM's answer when its engine has died).
    ``warm_log``: the container models JAX's XLA cache in its ``~/.cache/vllm`` mount: when
    every entry the cold ``log`` compiles is there intact, it replays ``warm_log`` instead;
    otherwise it replays ``log`` and writes each entry as its compilation finishes.
    ``xla_entry_bytes``: size of each fake cache entry (default 16384).
    ``answers``: how the model answers chat completions once the server is up (default
    ``"good"``), one of fake_docker's ``ANSWER_FAILURES``: a build that starts but cannot answer
    (tpu-inference #3406: Gemma 4 E2B/E4B text generation was garbage on the TPU image).
    ``by_args``: ``[[ARGS, SCENARIO], ...]``: a run whose command holds ``ARGS`` (consecutive
    words, e.g. ``["--gpu-memory-utilization", "0.98"]``) replays that ``SCENARIO`` instead,
    as the server's fate follows its flags (the first match wins).
    """

    speed: float
    exit_at: float
    exit_code: int
    restart_log: str
    health_status: int
    warm_log: str
    xla_entry_bytes: int
    answers: str
    by_args: list[tuple[list[str], Scenario]]


class SshHostFactory(Protocol):
    """Signature of the ``ssh_host_factory`` fixture."""

    def __call__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        images_present: Iterable[str] = (),
        docker_requires_sudo: bool = True,
        user_created_after: float | None = 0.0,
    ) -> SshHost: ...


def _chown(path: Path, uid: int | None, gid: int | None) -> None:
    if uid is not None and gid is not None and os.getuid() == 0:
        os.chown(path, uid, gid)


class FakeDocker:
    """Test-side view of the fake docker daemon state (knobs in, observations out)."""

    def __init__(self, state_dir: Path, uid: int | None = None, gid: int | None = None) -> None:
        self.state_dir = state_dir
        self._uid = uid
        self._gid = gid
        self._daemon = fake_docker.Daemon(state_dir)

    # -- knobs ----------------------------------------------------------------------------
    def _write(self, name: str, data: Any) -> None:
        path = self.state_dir / name
        fake_docker.write_json_atomic(path, data)
        path.chmod(0o644)
        _chown(path, self._uid, self._gid)

    def set_scenario(
        self,
        log: str,
        *,
        speed: float = 1.0,
        exit_at: float | None = None,
        exit_code: int | None = None,
        restart_log: str | None = None,
        health_status: int | None = None,
        answers: str | None = None,
    ) -> None:
        """Every following ``docker run`` replays ``log`` at ``speed``x."""
        scenario: Scenario = {"log": log, "speed": speed}
        if exit_at is not None:
            scenario["exit_at"] = exit_at
        if exit_code is not None:
            scenario["exit_code"] = exit_code
        if restart_log is not None:
            scenario["restart_log"] = restart_log
        if health_status is not None:
            scenario["health_status"] = health_status
        if answers is not None:
            scenario["answers"] = answers
        self._write("scenario.json", scenario)

    def set_scenarios(self, scenarios: Sequence[Scenario]) -> None:
        """The Nth ``docker run`` from now on (counting all runs) gets item N; the last repeats."""
        self._write("scenario.json", list(scenarios))

    def require_sudo(self, required: bool = True) -> None:
        """False models a user in the ``docker`` group (plain ``docker`` works)."""
        knobs = self._daemon.knobs()
        knobs["require_sudo"] = required
        self._write("daemon.json", knobs)

    def set_pull_error(self, image: str, message: str) -> None:
        """Make ``docker pull``/``run`` of ``image`` fail with ``message`` from the daemon."""
        knobs = self._daemon.knobs()
        knobs.setdefault("pull_errors", {})[fake_docker.normalize_image(image)] = message
        self._write("daemon.json", knobs)

    def set_pull_seconds(self, seconds: float) -> None:
        """Make ``docker pull`` of a missing image take ``seconds`` (a multi-GiB download)."""
        knobs = self._daemon.knobs()
        knobs["pull_seconds"] = seconds
        self._write("daemon.json", knobs)

    def set_gcplogs_error(self, message: str, failures: int | None = None) -> None:
        """Make Cloud Logging refuse the gcplogs driver (its start-time ping) with ``message``,
        for the next ``failures`` container starts (None: every one)."""
        knobs = self._daemon.knobs()
        knobs["gcplogs_error"] = message
        if failures is not None:
            knobs["gcplogs_failures"] = failures
        self._write("daemon.json", knobs)

    def add_image(self, image: str) -> None:
        """Mark ``image`` as already pulled."""
        images = self.images()
        if fake_docker.normalize_image(image) not in images:
            images.append(fake_docker.normalize_image(image))
        self._write("images.json", {"images": images})

    # -- observations ---------------------------------------------------------------------
    def images(self) -> list[str]:
        return self._daemon.images()

    def invocations(self, tool: str | None = "docker") -> list[dict[str, Any]]:
        """Recorded calls (``tool``: "docker", "sudo" or None for both), oldest first."""
        path = self.state_dir / "invocations.jsonl"
        if not path.exists():
            return []
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in records if tool is None or r.get("tool") == tool]

    def container(self, ref: str) -> fake_docker.Container | None:
        return self._daemon.find(ref)

    def cloud_logging(self) -> list[dict[str, Any]]:
        """The entries the gcplogs driver shipped to (fake) Cloud Logging, oldest first."""
        path = self.state_dir / "cloud_logging.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def inspect(self, ref: str) -> dict[str, Any] | None:
        """What ``docker inspect REF`` would return for one container, or None."""
        container = self._daemon.find(ref)
        return container.inspect() if container is not None else None

    def is_ready(self, ref: str) -> bool:
        """The container's HTTP server is listening (it printed startup complete)."""
        container = self._daemon.find(ref)
        return bool(container and container.raw_state().get("Ready"))

    def logs(self, ref: str) -> str:
        """Both streams interleaved in write order, as ``docker logs REF 2>&1`` prints them."""
        container = self._daemon.find(ref)
        if container is None:
            return ""
        entries, _ = fake_docker.iter_log(container, 0)
        return "".join(str(e.get("log", "")) for e in entries)

    def wait_for(
        self,
        ref: str,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = 10.0,
        what: str = "condition",
    ) -> dict[str, Any]:
        """Poll ``inspect(ref)`` until ``predicate`` holds; raise with the log tail otherwise."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.inspect(ref)
            if last is not None and predicate(last):
                return last
            time.sleep(0.02)
        tail = self.logs(ref)[-2000:]
        state = last["State"] if last else None
        raise AssertionError(f"{ref}: timed out waiting for {what}; state={state}\n{tail}")

    def wait_status(self, ref: str, status: str, timeout: float = 10.0) -> dict[str, Any]:
        return self.wait_for(
            ref, lambda i: i["State"]["Status"] == status, timeout, f"status {status}"
        )

    def wait_ready(self, ref: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_ready(ref):
                return
            time.sleep(0.02)
        raise AssertionError(f"{ref}: not ready after {timeout}s\n{self.logs(ref)[-2000:]}")

    # -- runtime controls -----------------------------------------------------------------
    def _control(self, ref: str, control: dict[str, Any]) -> None:
        container = self._daemon.find(ref)
        if container is None:
            raise KeyError(f"no such container: {ref}")
        container.send_control(control)
        path = container.dir / "control.json"
        with contextlib.suppress(FileNotFoundError):
            _chown(path, self._uid, self._gid)

    def restart(self, ref: str, *, log: str | None = None, speed: float | None = None) -> None:
        """Crash-and-restart as a restart policy would: RestartCount+1, new StartedAt, new boot."""
        control: dict[str, Any] = {"action": "restart"}
        if log is not None:
            control["log"] = log
        if speed is not None:
            control["speed"] = speed
        self._control(ref, control)

    def crash(self, ref: str, exit_code: int = 137, lines: Sequence[str] = ()) -> None:
        """Make the container exit now with ``exit_code`` (silently unless ``lines`` given)."""
        self._control(ref, {"action": "exit", "code": exit_code, "lines": list(lines)})

    def kill_all(self) -> None:
        """SIGKILL every container process group (teardown)."""
        for container in self._daemon.all_containers():
            container.kill_process(timeout=2.0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _world_executable(path: str) -> bool:
    """Can a different, unprivileged user execute ``path`` (every parent dir searchable)?"""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        for parent in real.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


def _pick_python(for_other_user: bool) -> str:
    """An interpreter (>= 3.9, stdlib only needed) that the SSH user can run."""
    candidates = [sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"]
    found = shutil.which("python3")
    if found:
        candidates.append(found)
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        if for_other_user and not _world_executable(candidate):
            continue
        check = subprocess.run(
            [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 9))"],
            capture_output=True,
            check=False,
        )
        if check.returncode == 0:
            return os.path.realpath(candidate) if for_other_user else candidate
    raise RuntimeError(f"no python3 >= 3.9 usable by the SSH test user among {candidates}")


def _sbin_tool(name: str) -> str:
    """Path of an admin tool even when /usr/sbin is not on the test runner's PATH ('' if none)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/sbin"):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return ""


def _missing_tools() -> list[str]:
    missing = [SSHD] if not os.path.exists(SSHD) else []
    missing += [t for t in ("ssh", "ssh-keygen") if shutil.which(t) is None]
    return missing


def _setenv_token(name: str, value: str) -> str:
    """One sshd_config ``SetEnv`` argument; sshd's quoting cannot carry these characters."""
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise ValueError(f"bad environment variable name {name!r}")
    if any(ch in value for ch in ('"', "\\", "\n", "\r")):
        raise ValueError(f"{name}: sshd SetEnv values cannot contain quotes/backslashes/newlines")
    return f'"{name}={value}"'


def _remove_tree(path: Path, attempts: int = 20) -> None:
    """rmtree until the directory is gone: a process killed a moment ago may still be creating
    a file in it (a loaded machine runs it late), so one pass can leave the directory behind."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.1)


def _kill_uid_processes(uid: int) -> None:
    """SIGKILL every process of the dedicated test user (all were started by this test)."""
    for _ in range(3):
        victims = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("Uid:") and int(line.split()[1]) == uid:
                    victims.append(int(entry.name))
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


class SshHost:
    """A running sshd plus everything a test needs to talk to it like pulumi-command does.

    Attributes: ``host``/``port``/``user`` to connect to; ``client_private_key_openssh`` (the
    OpenSSH PEM a ``ConnectionArgs.private_key`` takes); ``host_public_key`` (``ssh-ed25519
    AAAA...``, what ``ConnectionArgs.host_key`` pins); ``home`` (the remote ``~``);
    ``root_home`` (``~`` under the fake sudo); ``docker_state`` and ``docker`` (the fake
    daemon's state dir and its test-side handle); ``env`` (everything sshd ``SetEnv``s);
    ``sshd_log`` (sshd's own log, handy when a connection fails); ``vllm_port`` (a free
    loopback port for this VM's fake vLLM: tests set the stack's ``vllm.port`` to it, so two
    test runs on one machine never both bind vLLM's default 8000).
    """

    host: str
    port: int
    user: str
    home: Path
    root_home: Path
    client_private_key_openssh: str
    host_public_key: str
    docker_state: Path
    docker: FakeDocker
    env: dict[str, str]
    workdir: Path
    sshd_log: Path
    vllm_port: int

    def __init__(self) -> None:  # use SshHost.start()
        self._proc: subprocess.Popen[bytes] | None = None
        self._clients: list[subprocess.Popen[bytes]] = []
        self._created_uid: int | None = None
        self._stopped = False
        self._agent_timer: threading.Timer | None = None
        self._root_helper: RootHelper | None = None
        #: sshd_config lines ahead of the defaults (sshd keeps a keyword's first value).
        self.sshd_options: tuple[str, ...] = ()

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        images_present: Iterable[str] = (),
        docker_requires_sudo: bool = True,
        user_created_after: float | None = 0.0,
        sshd_options: Sequence[str] = (),
    ) -> SshHost:
        """Create user, keys, harness copy and fake-docker state; start sshd and wait for it.

        ``user_created_after``: seconds after sshd is up until the guest agent has created the
        login (0: at once; None: when the test calls ``create_user()``).
        ``sshd_options``: sshd_config lines that win over the defaults below (e.g.
        ``AllowTcpForwarding yes`` for a jump host, ``AcceptEnv FOO``), for tests of the
        SSH client itself (tests/ssh/test_standins_command.py)."""
        missing = _missing_tools()
        if missing:
            raise RuntimeError(f"missing {missing}; install with: {APT_HINT}")
        self = cls()
        self.host = HOST
        self.sshd_options = tuple(sshd_options)
        self.vllm_port = _free_port()
        # The SSH user runs the fake bin/ from here: pick a base that is not mounted noexec.
        base = os.environ.get("TPU_VLLM_SSH_TMPDIR")
        self.workdir = Path(tempfile.mkdtemp(prefix="tpu-vllm-sshd-", dir=base))
        self.workdir.chmod(0o755)
        try:
            self._setup(dict(env or {}), list(images_present), docker_requires_sudo)
        except BaseException:
            self.stop()
            raise
        if user_created_after == 0.0:
            self.create_user()
        elif user_created_after is not None:
            timer = threading.Timer(user_created_after, self.create_user)
            timer.daemon = True
            timer.start()
            self._agent_timer = timer
        return self

    def create_user(self) -> None:
        """What the guest agent does once it gets to the ``ssh-keys`` user: install the key."""
        tmp = self._authorized.with_suffix(".tmp")
        tmp.write_text(self._client_public_key)
        tmp.chmod(0o644)
        tmp.replace(self._authorized)

    @property
    def root_modelled(self) -> bool:
        """Do the container and the fake sudo's file commands act as real root here?"""
        return self._root_helper is not None

    @property
    def user_created(self) -> bool:
        return self._authorized.read_text().strip() != ""

    def _setup(self, extra_env: dict[str, str], images: list[str], requires_sudo: bool) -> None:
        work = self.workdir
        keys = work / "keys"
        keys.mkdir(mode=0o700)
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"tpu-vllm-test-{name}",
                 "-f", str(keys / name)],
                check=True,
                capture_output=True,
            )  # fmt: skip
        self._key_path = keys / "client"
        self.client_private_key_openssh = self._key_path.read_text()
        self.host_public_key = " ".join((keys / "host.pub").read_text().split()[:2])
        # sshd reads authorized_keys as the target user, so it cannot live in the 0700 keys dir.
        # Empty until the "guest agent" creates the user (see ``create_user``).
        authorized = work / "authorized_keys"
        self._authorized = authorized
        self._client_public_key = (keys / "client.pub").read_text()
        authorized.write_text("")
        authorized.chmod(0o644)

        # The SSH user may not be able to read the checkout (e.g. under /root): copy the fakes.
        harness = work / "harness"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(FAKES_DIR, harness / "fakes", ignore=ignore)
        if FIXTURES_DIR.is_dir():
            shutil.copytree(FIXTURES_DIR, harness / "fixtures", ignore=ignore)
        for path in [harness, *harness.rglob("*")]:
            mode = path.stat().st_mode
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))

        self.home = work / "home"
        self.root_home = work / "root-home"
        self.docker_state = work / "docker-state"
        self.sshd_log = work / "sshd.log"
        uid = gid = None
        if os.getuid() == 0 and _sbin_tool("useradd"):
            self.user, uid, gid = self._create_user(self.home)
        else:
            self.user = pwd.getpwuid(os.getuid()).pw_name
        for path, mode in ((self.home, 0o700), (self.root_home, 0o700), (self.docker_state, 0o755)):
            path.mkdir(mode=mode)
            _chown(path, uid, gid)
        lock = self.docker_state / "lock"
        lock.touch()
        lock.chmod(0o666)
        _chown(lock, uid, gid)

        self.docker = FakeDocker(self.docker_state, uid, gid)
        if uid is not None and gid is not None:
            self._root_helper = RootHelper(
                self.docker_state / fake_docker.ROOT_HELPER_SOCKET, uid, gid, confine=work
            ).start()
        for image in images:
            self.docker.add_image(image)
        if not requires_sudo:
            self.docker.require_sudo(False)

        python = _pick_python(for_other_user=uid is not None)
        fake_bin = harness / "fakes" / "bin"
        plumbing = {
            "FAKE_DOCKER_STATE": str(self.docker_state),
            "FAKE_PYTHON": python,
            "FAKE_HARNESS_DIR": str(harness / "fakes"),
            "FAKE_VLLM_LOGS_DIR": str(harness / "fixtures" / "vllm_logs"),
            "FAKE_ROOT_HOME": str(self.root_home),
            "FAKE_SUDO_PATH": f"{fake_bin}:{SUDO_SECURE_PATH}",
        }
        keep = sorted(set(plumbing) | set(extra_env) | {"FAKE_SUDO_KEEP"})
        self.env = {
            "PATH": f"{fake_bin}:{USER_PATH_TAIL}",
            "HOME": str(self.home),
            **plumbing,
            "FAKE_SUDO_KEEP": ",".join(keep),
            **extra_env,
        }
        self._known_hosts = keys / "known_hosts"
        self._start_sshd(keys, authorized)
        self._known_hosts.write_text(f"{self.known_hosts_name} {self.host_public_key}\n")

    @property
    def known_hosts_name(self) -> str:
        """How ssh names this host in known_hosts: `[HOST]:PORT`, or the bare host on 22."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def _create_user(self, home: Path) -> tuple[str, int, int]:
        for _ in range(10):
            name = "tv" + secrets.token_hex(4)
            try:
                pwd.getpwnam(name)
                continue
            except KeyError:
                pass
            # '*' (not '!'): no password login, but not "locked" for sshd with UsePAM no.
            useradd = _sbin_tool("useradd")
            subprocess.run(
                [useradd, "--home-dir", str(home), "--no-create-home", "--shell", "/bin/bash",
                 "--user-group", "--password", "*", name],
                check=True,
                capture_output=True,
            )  # fmt: skip
            entry = pwd.getpwnam(name)
            self._created_uid = entry.pw_uid
            self.user = name
            return name, entry.pw_uid, entry.pw_gid
        raise RuntimeError("could not pick an unused user name")

    @property
    def listen_address(self) -> tuple[str, int]:
        """Where sshd itself listens: where clients connect (a fake TPU VM listens elsewhere)."""
        return self.host, self.port

    def _sshd_config(self, keys: Path, authorized: Path) -> str:
        setenv = " ".join(_setenv_token(k, v) for k, v in self.env.items())
        return "\n".join(
            [
                *self.sshd_options,
                f"Port {self.listen_address[1]}",
                f"ListenAddress {self.listen_address[0]}",
                "AddressFamily inet",
                f"HostKey {keys / 'host'}",
                "PidFile none",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "AuthenticationMethods publickey",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "HostbasedAuthentication no",
                f"AuthorizedKeysFile {authorized}",
                "StrictModes no",
                f"AllowUsers {self.user}",
                # What Debian/Ubuntu images ship: pulumi-command's `environment` only gets
                # LANG/LC_* through, which is why the project must not depend on it.
                "AcceptEnv LANG LC_*",
                "PermitUserEnvironment no",
                "X11Forwarding no",
                "AllowAgentForwarding no",
                "AllowTcpForwarding no",
                "PrintMotd no",
                "PrintLastLog no",
                "UseDNS no",
                "LogLevel VERBOSE",
                "Subsystem sftp internal-sftp",
                f"SetEnv {setenv}",
                "",
            ]
        )

    def _start_sshd(self, keys: Path, authorized: Path) -> None:
        if os.getuid() == 0:
            # Privilege separation directory; root-owned and not group/world writable.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        config = keys / "sshd_config"
        last_error = ""
        for _attempt in range(5):
            self.port = _free_port()
            config.write_text(self._sshd_config(keys, authorized))
            check = subprocess.run(
                [SSHD, "-t", "-f", str(config)], capture_output=True, text=True, check=False
            )
            if check.returncode != 0:
                raise RuntimeError(f"sshd rejected its config: {check.stderr}")
            with open(self.sshd_log, "ab") as log:
                self._proc = subprocess.Popen(
                    [SSHD, "-D", "-e", "-f", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            if self._wait_listening(10.0):
                return
            last_error = self.sshd_log.read_text(errors="replace")
            self._stop_sshd()
            if "Address already in use" not in last_error:
                break
        raise RuntimeError(f"sshd did not start on {self.host}:{self.port}:\n{last_error}")

    def _wait_listening(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                    if sock.recv(64).startswith(b"SSH-2.0-"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def _stop_sshd(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def stop(self) -> None:
        """Kill clients, containers and the user's processes; stop sshd; remove user and files."""
        if self._stopped:
            return
        self._stopped = True
        if self._agent_timer is not None:
            self._agent_timer.cancel()
        for client in self._clients:
            if client.poll() is None:
                client.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    client.wait(timeout=5)
            for stream in (client.stdin, client.stdout, client.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if hasattr(self, "docker"):
            self.docker.kill_all()
        if self._created_uid is not None:
            _kill_uid_processes(self._created_uid)
        if self._root_helper is not None:
            self._root_helper.stop()
        self._stop_sshd()
        if self._created_uid is not None:
            _kill_uid_processes(self._created_uid)
            self._remove_user()
        if os.environ.get("TPU_VLLM_KEEP_SSH_TMP") != "1":
            _remove_tree(self.workdir)

    def _remove_user(self) -> None:
        """Undo ``_create_user`` (its processes are already killed)."""
        userdel = _sbin_tool("userdel")
        if userdel:
            subprocess.run([userdel, self.user], capture_output=True, check=False)

    # -- talking to it --------------------------------------------------------------------
    def ssh_argv(self, command: str, *, host_key: str | None = None) -> list[str]:
        """The system ``ssh`` call that sends ``command`` as one exec request, host key pinned."""
        known_hosts = self._known_hosts
        if host_key is not None:
            known_hosts = self.workdir / "keys" / f"known_hosts.{secrets.token_hex(4)}"
            known_hosts.write_text(f"{self.known_hosts_name} {host_key}\n")
        return [
            "ssh", "-F", "/dev/null", "-T",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "HostKeyAlgorithms=ssh-ed25519",
            "-o", "CheckHostIP=no",
            "-o", "UpdateHostKeys=no",
            "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none",
            "-o", "PasswordAuthentication=no",
            "-o", "KbdInteractiveAuthentication=no",
            "-o", "ControlMaster=no",
            "-o", "ControlPath=none",
            "-o", "ConnectTimeout=10",
            "-o", "LogLevel=ERROR",
            "-i", str(self._key_path),
            "-p", str(self.port),
            "-l", self.user,
            "--", self.host, command,
        ]  # fmt: skip

    def run(
        self,
        command: str,
        stdin: bytes | None = None,
        timeout: float = 60,
        *,
        host_key: str | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` the way ``remote.Command`` does: one exec request, stdin then EOF."""
        return subprocess.run(
            self.ssh_argv(command, host_key=host_key),
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=timeout,
            check=False,
        )

    def popen(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        host_key: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` without waiting (stdout/stderr piped); killed at teardown."""
        proc = subprocess.Popen(
            self.ssh_argv(command, host_key=host_key),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._clients.append(proc)
        if stdin is not None and proc.stdin is not None:
            pipe = proc.stdin

            def feed() -> None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    pipe.write(stdin)
                    pipe.close()

            threading.Thread(target=feed, daemon=True).start()
        return proc

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pulumi_command.remote.ConnectionArgs`` pointing here."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "private_key": self.client_private_key_openssh,
            "host_key": self.host_public_key,
        }

    def __enter__(self) -> SshHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _skip_or_fail(reason: str) -> None:
    """Missing sshd fails in CI (the layer must be able to fail) and skips on a dev box."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def ssh_host_factory() -> Iterator[SshHostFactory]:
    """Start one or more ``SshHost``s with per-test env/knobs; all stop after the test."""
    started: list[SshHost] = []

    def start(
        *,
        env: Mapping[str, str] | None = None,
        images_present: Iterable[str] = (),
        docker_requires_sudo: bool = True,
        user_created_after: float | None = 0.0,
    ) -> SshHost:
        missing = _missing_tools()
        if missing:
            _skip_or_fail(f"real-SSH tests need {missing}: {APT_HINT}")
        host = SshHost.start(
            env=env,
            images_present=images_present,
            docker_requires_sudo=docker_requires_sudo,
            user_created_after=user_created_after,
        )
        started.append(host)
        return host

    try:
        yield start
    finally:
        for host in reversed(started):
            host.stop()


@pytest.fixture
def ssh_host(ssh_host_factory: SshHostFactory) -> SshHost:
    """A fresh SSH "TPU VM" with default settings (image not pulled, sudo required)."""
    return ssh_host_factory()
