"""The TPU VMs behind the fake TPU API's nodes: a host of their own each, booted as nodes appear.

`pulumi up` through the real engine dials the node where the TPU API says it is
(`networkEndpoints[].accessConfig.externalIp`, port 22) as the user the program names
(`tpu-vllm`, components/vm/ssh.py), with the key the program put into the node's `ssh-keys`
metadata, and verifies the host key it read from the node's guest attributes. So each node of
`tests/support/fakes/tpu_api.py` (with `FakeTpuApi(machines=TpuVmFleet(...))`) gets a VM that does
what a TPU VM image does with that metadata:

* its own address, 127.0.2.N (all of 127/8 is loopback on Linux), held with a lock file for
  its life so parallel test runs (pytest-xdist workers, other checkouts) never share one, and
  its own network namespace, joined to that address (tests/support/fakes/netns.py): sshd listens on
  the VM's port 22 and vLLM on `vllm.port`, and the readiness check's `127.0.0.1` is the VM's;
* the guest agent's accounts (GoogleCloudPlatform/guest-agent `non_windows_accounts.go`:
  `getUserKeys` takes `user:KEY` lines from `ssh-keys`; no account when OS Login is on,
  `oslogin.go`, here `enable-oslogin: TRUE`), created a moment after sshd is up, so the first
  dials are refused as on a booting node; the user exists only inside the VM (its own
  /etc/passwd in a mount namespace: a fixed name cannot clash with another VM's);
* its host key, published to guest attributes once booted and only with
  `enable-guest-attributes: TRUE` (`instance_setup.go`; the fake API checks the metadata);
* gone with its node: when the queued resource is deleted or its run ends, nothing answers at
  the address any more and every process of the VM is killed, as Google deletes the VM.

The rest of the VM (fake docker replaying vLLM logs, fake sudo and gcloud, the root helper) is
`tests/support/fakes/ssh_host.py`'s. Needs root (namespaces, uids): `TpuVmFleet.available()` says
why not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from .netns import Relay
from .ssh_host import SSHD, Scenario, SshHost, _missing_tools, _sbin_tool

#: The VMs' addresses: 127.0.2.1 .. 127.0.2.254 (127.0.0.1 is the test machine's own).
ADDRESS_PREFIX = "127.0.2."
#: The VM users' uids: none of these may be in the machine's /etc/passwd.
UID_RANGE = range(62000, 62999)
LOCK_DIR = Path(tempfile.gettempdir()) / "tpu-vllm-fake-vms"
SSH_PORT = 22
#: What a fresh node replays when its server starts (tests/support/fixtures/vllm_logs), at 2000x:
#: the 857 s cold start in under half a second.
DEFAULT_SCENARIO: Scenario = {"log": "v5e1_ready.log", "speed": 2000.0}


def _lock(name: str) -> IO[str] | None:
    """An exclusive lock on LOCK_DIR/name, held as long as the returned file stays open."""
    LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
    handle = open(LOCK_DIR / name, "w")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _bindable(address: str, ports: Iterable[int]) -> bool:
    import socket

    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


def claim_address(ports: Iterable[int]) -> tuple[str, IO[str]]:
    """A 127.0.2.N no other VM holds and where `ports` are free; its lock."""
    wanted = [SSH_PORT, *ports]
    for n in range(1, 255):
        address = f"{ADDRESS_PREFIX}{n}"
        held = _lock(f"address-{address}")
        if held is None:
            continue
        if _bindable(address, wanted):
            return address, held
        held.close()
    raise RuntimeError(f"no free {ADDRESS_PREFIX}N address with ports {wanted} (locks: {LOCK_DIR})")


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    return True
    return False


def claim_uid() -> tuple[int, IO[str]]:
    for uid in UID_RANGE:
        held = _lock(f"uid-{uid}")
        if held is None:
            continue
        if not _uid_in_use(uid):
            return uid, held
        held.close()
    raise RuntimeError(f"no free uid in {UID_RANGE} (locks: {LOCK_DIR})")


def guest_accounts(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """The accounts the guest agent creates from `ssh-keys`: user -> public keys."""
    if str(metadata.get("enable-oslogin", "")).upper() == "TRUE":
        return {}
    accounts: dict[str, list[str]] = {}
    for line in str(metadata.get("ssh-keys", "")).splitlines():
        user, sep, key = line.strip().partition(":")
        if sep and user and key.split()[:1] and key.split()[0].startswith(("ssh-", "ecdsa-")):
            accounts.setdefault(user, []).append(key.strip())
    return accounts


class FakeTpuVm(SshHost):
    """One node's VM: sshd and everything it starts in namespaces of their own (see above)."""

    def __init__(self) -> None:
        super().__init__()
        self._relays: list[Relay] = []
        self._netns_fd: int | None = None
        self._uid_lock: IO[str] | None = None
        self._accounts: dict[str, list[str]] = {}
        self._reach: list[int] = []
        self._serving: list[int] = []
        self.booted = threading.Event()

    @classmethod
    def boot(
        cls,
        address: str,
        metadata: Mapping[str, Any],
        *,
        env: Mapping[str, str],
        reach: Iterable[int],
        serving_ports: Iterable[int],
        images_present: Iterable[str] = (),
        account_delay: float = 0.5,
    ) -> FakeTpuVm:
        """Start the VM at `address`; the guest agent creates the accounts `account_delay`
        seconds after sshd is up."""
        missing = _missing_tools()
        if missing:
            raise RuntimeError(f"missing {missing}")
        self = cls()
        self.host, self.port = address, SSH_PORT
        self._accounts = guest_accounts(metadata)
        self._reach = list(reach)
        self._serving = list(serving_ports)
        self.vllm_port = self._serving[0] if self._serving else 0
        self.workdir = Path(tempfile.mkdtemp(prefix="tpu-vllm-vm-"))
        self.workdir.chmod(0o755)
        try:
            self._setup(dict(env), list(images_present), True)
        except BaseException:
            self.stop()
            raise
        timer = threading.Timer(account_delay, self.create_user)
        timer.daemon = True
        timer.start()
        self._agent_timer = timer
        return self

    # -- SshHost's hooks -------------------------------------------------------------------
    @property
    def listen_address(self) -> tuple[str, int]:
        return "0.0.0.0", SSH_PORT  # noqa: S104 - inside the VM's own network namespace

    def _create_user(self, home: Path) -> tuple[str, int, int]:
        """The metadata's user, in the VM's own /etc (see `_vm_etc`)."""
        if len(self._accounts) > 1:
            raise RuntimeError(f"the fake VM models one ssh-keys user, not {list(self._accounts)}")
        name = next(iter(self._accounts), "tpu-vllm-nobody")
        uid, self._uid_lock = claim_uid()
        self._created_uid = uid
        self._vm_etc(name, uid, home)
        return name, uid, uid

    def _vm_etc(self, name: str, uid: int, home: Path) -> None:
        """The VM's /etc: the machine's entries, except passwd, group and shadow, which hold
        the VM's user too. Mounted over the whole directory, not over the files: a file
        replaced by rename on the machine (useradd in a parallel test) would detach a mount
        on it in every other mount namespace (mount_namespaces(7)), and the user would vanish."""
        etc = self.workdir / "etc"
        host_etc = self.workdir / "host-etc"
        etc.mkdir()
        host_etc.mkdir()
        own = {"passwd", "group", "shadow"}
        for entry in Path("/etc").iterdir():
            if entry.name not in own:
                (etc / entry.name).symlink_to(host_etc / entry.name)
        for file, line in (
            ("passwd", f"{name}:x:{uid}:{uid}:{name}:{home}:/bin/bash"),
            ("group", f"{name}:x:{uid}:"),
            ("shadow", f"{name}:*:19000:0:99999:7:::"),
        ):
            kept = [
                entry
                for entry in Path("/etc", file).read_text().splitlines()
                if entry.split(":", 1)[0] != name
            ]
            (etc / file).write_text("\n".join([*kept, line]) + "\n")
            (etc / file).chmod(0o640 if file == "shadow" else 0o644)
        etc.chmod(0o755)

    def create_user(self) -> None:
        """The guest agent's account: the metadata's keys, authorized for its user."""
        keys = self._accounts.get(self.user, [])
        tmp = self._authorized.with_suffix(".tmp")
        tmp.write_text("".join(f"{key}\n" for key in keys))
        tmp.chmod(0o644)
        tmp.replace(self._authorized)

    def _start_sshd(self, keys: Path, authorized: Path) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        config = keys / "sshd_config"
        config.write_text(self._sshd_config(keys, authorized))
        check = subprocess.run(
            [SSHD, "-t", "-f", str(config)], capture_output=True, text=True, check=False
        )
        if check.returncode != 0:
            raise RuntimeError(f"sshd rejected its config: {check.stderr}")
        inside = " && ".join(
            [
                f"{_sbin_tool('ip') or 'ip'} link set lo up",
                f"mount --bind /etc {self.workdir / 'host-etc'}",
                f"mount --bind {self.workdir / 'etc'} /etc",
                f"exec {SSHD} -D -e -f {config}",
            ]
        )
        own = os.readlink("/proc/self/ns/net")
        with open(self.sshd_log, "ab") as log:
            self._proc = subprocess.Popen(
                ["unshare", "--net", "--mount", "--propagation", "private", "--",
                 "sh", "-c", inside],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # fmt: skip
        netns = f"/proc/{self._proc.pid}/ns/net"
        deadline = time.monotonic() + 10
        while os.readlink(netns) == own:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the VM's namespace never appeared:\n{self._log_tail()}")
            time.sleep(0.005)
        self._netns_fd = os.open(netns, os.O_RDONLY)
        inner = "127.0.0.1"
        for port in (SSH_PORT, *self._serving):  # the node's address -> the VM's own ports
            self._relays.append(Relay((self.host, port), (inner, port), target_ns=self._netns_fd))
        for port in self._reach:  # the loopback fakes, at the same address inside the VM
            self._relays.append(Relay((inner, port), (inner, port), listen_ns=self._netns_fd))
        if not self._wait_listening(10.0):
            raise RuntimeError(f"sshd did not start in the VM at {self.host}:\n{self._log_tail()}")
        self.booted.set()

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.sshd_log.read_text(errors="replace")[-3000:]
        return ""

    def _remove_user(self) -> None:
        """The user lived only in the VM's passwd: release its uid."""
        if self._uid_lock is not None:
            self._uid_lock.close()
            self._uid_lock = None

    def stop(self) -> None:
        """The VM is deleted: its address stops answering first, then everything is killed."""
        for relay in self._relays:
            relay.stop()
        self._relays = []
        super().stop()
        if self._netns_fd is not None:
            os.close(self._netns_fd)
            self._netns_fd = None


def available() -> str | None:
    """Why fake TPU VMs cannot run here, or None."""
    if os.getuid() != 0:
        return "fake TPU VMs need root (network and mount namespaces, their own uids)"
    missing = [t for t in ("unshare", "mount") if shutil.which(t) is None]
    if missing or not _sbin_tool("ip"):
        return f"fake TPU VMs need {[*missing, 'ip'] if not _sbin_tool('ip') else missing}"
    return None


class TpuVmFleet:
    """The fake TPU API's machines: a VM per node, booted when the node is created (the queued
    resource enters PROVISIONING) and stopped when it goes (deleted, or its run ended).

    `env` is every VM's environment (GCE_METADATA_HOST, SECRET_MANAGER_API_ENDPOINT, ...);
    `reach` the loopback ports of the fakes the VMs call; `serving_ports` what a VM serves
    beside SSH (`vllm.port`). Each new VM replays `scenario` when its server starts.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        reach: Iterable[int],
        serving_ports: Iterable[int],
        scenario: Scenario | None = None,
        images_present: Iterable[str] = (),
        account_delay: float = 0.5,
    ) -> None:
        self.env = dict(env)
        self.reach = list(reach)
        self.serving_ports = list(serving_ports)
        self.scenario: Scenario = dict(scenario or DEFAULT_SCENARIO)  # type: ignore[assignment]
        self.images_present = list(images_present)
        self.account_delay = account_delay
        self._lock = threading.RLock()
        self._addresses: dict[str, tuple[str, IO[str]]] = {}
        self._vms: dict[str, FakeTpuVm] = {}
        self._gone: set[str] = set()
        self._threads: list[threading.Thread] = []
        #: Every VM ever booted, oldest first: (node name, address, VM).
        self.history: list[tuple[str, str, FakeTpuVm]] = []
        self.errors: list[str] = []
        self._ticker: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- the fake TPU API's hooks (called with its lock held: nothing slow here) ---------------
    def node_created(self, key: str, node_name: str, metadata: Mapping[str, Any]) -> None:
        with self._lock:
            if key in self._addresses:
                return
            address, held = claim_address(self.serving_ports)
            self._addresses[key] = (address, held)
        thread = threading.Thread(
            target=self._boot, args=(key, node_name, address, dict(metadata)), daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def external_ip(self, key: str) -> str | None:
        with self._lock:
            found = self._addresses.get(key)
            return found[0] if found else None

    def host_keys(self, key: str) -> dict[str, str]:
        """`{type: base64}` once the VM has booted; empty before (and after it is gone)."""
        with self._lock:
            vm = self._vms.get(key)
        if vm is None or not vm.booted.is_set():
            return {}
        key_type, blob = vm.host_public_key.split()[:2]
        return {key_type: blob}

    def node_gone(self, key: str) -> None:
        with self._lock:
            if key not in self._addresses:
                return
            vm = self._vms.pop(key, None)
            if vm is None:  # still booting: the boot thread deletes it when it is done
                self._gone.add(key)
                return
            found = self._addresses.pop(key)
            for relay in vm._relays:  # at once: nothing answers at the address any more
                relay.stop()
            # Started and registered with the address's removal, under the lock: a
            # `wait_settled` that sees the address gone must also see the deletion to wait for.
            thread = threading.Thread(target=self._delete, args=(vm, found[1]), daemon=True)
            self._threads.append(thread)
            thread.start()

    # -- VM lifecycle ----------------------------------------------------------------------
    def _boot(self, key: str, node: str, address: str, metadata: dict[str, Any]) -> None:
        vm: FakeTpuVm | None = None
        try:
            vm = FakeTpuVm.boot(
                address,
                metadata,
                env=self.env,
                reach=self.reach,
                serving_ports=self.serving_ports,
                images_present=self.images_present,
                account_delay=self.account_delay,
            )
            vm.docker.set_scenarios([self.scenario])
        except Exception as error:  # noqa: BLE001 - shown by the test that needed the VM
            self.errors.append(f"{node} at {address}: {error}")
            vm = None
        with self._lock:
            gone = vm is None or key in self._gone
            self._gone.discard(key)
            if gone:
                held = self._addresses.pop(key)[1]
            else:
                assert vm is not None
                self._vms[key] = vm
                self.history.append((node, address, vm))
        if gone:
            self._delete(vm, held)

    @staticmethod
    def _delete(vm: FakeTpuVm | None, address_lock: IO[str]) -> None:
        if vm is not None:
            vm.stop()
        address_lock.close()

    def vm(self, address: str, timeout: float = 30.0) -> FakeTpuVm:
        """The running VM at `address`, once it has booted."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for key, (held, _) in self._addresses.items():
                    vm = self._vms.get(key)
                    if held == address and vm is not None:
                        return vm
            time.sleep(0.05)
        raise AssertionError(f"no VM booted at {address}; errors: {self.errors}")

    @property
    def running(self) -> list[str]:
        """Addresses of the VMs that exist now."""
        with self._lock:
            return sorted(address for address, _ in self._addresses.values())

    def watch(self, tick: Any, period: float = 0.2) -> None:
        """Call `tick()` (the fake API's clock step) every `period` s, so a run that ends while
        nobody asks the API still takes its VM down, as Google's clock does."""

        def loop() -> None:
            while not self._stopping.wait(period):
                with contextlib.suppress(Exception):
                    tick()

        self._ticker = threading.Thread(target=loop, name="tpu-vm-ticker", daemon=True)
        self._ticker.start()

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Wait for every boot and deletion started so far."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stopping.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self.wait_settled()
        with self._lock:
            keys = list(self._addresses)
        for key in keys:
            self.node_gone(key)
        self.wait_settled()
