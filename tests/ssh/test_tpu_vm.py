"""The fake TPU API's nodes as VMs (tests/support/fakes/tpu_vm.py): what the real engine dials.

A node gets a VM of its own at the external IP the API reports, with the metadata's user and
key, the host key the API publishes, its own 127.0.0.1 (two nodes serve the same port), a way
to the loopback fakes, and nothing left once the node is deleted or its run ends.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import privileged
from tests.support.fakes import tpu_vm
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.tpu_api import FakeTpuApi, StateDurations
from tests.support.fakes.tpu_vm import TpuVmFleet, guest_accounts
from tests.support.tpu_client import PARENT, api, product_body

SERVING_PORT = 8000
FAST = StateDurations(0.05, 0.05, 0.05, 0.05, 0.05, 0.05)


@pytest.fixture
def client_key(tmp_path: Path) -> tuple[Path, str]:
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key, " ".join(key.with_suffix(".pub").read_text().split()[:2])


@pytest.fixture
def fleet(fake_metadata: FakeMetadataServer) -> Iterator[tuple[FakeTpuApi, TpuVmFleet]]:
    reason = tpu_vm.available()
    if reason:
        privileged.skip_or_fail(reason)
    machines = TpuVmFleet(
        env={"GCE_METADATA_HOST": fake_metadata.host},
        reach=[fake_metadata.port],
        serving_ports=[SERVING_PORT],
        account_delay=0.3,
    )
    fake = FakeTpuApi(durations=FAST, machines=machines).start()
    machines.watch(fake.tick)
    try:
        yield fake, machines
    finally:
        machines.stop()
        fake.stop()


def request_node(fake: FakeTpuApi, node_id: str, metadata: dict[str, str]) -> dict[str, Any]:
    """Create a queued resource for `node_id` and wait until its node is READY."""
    body = product_body(node_id=node_id)
    body["tpu"]["nodeSpec"][0]["node"]["metadata"] = metadata
    client = api(fake).projects().locations()
    client.queuedResources().create(
        parent=PARENT, queuedResourceId=f"{node_id}-qr", body=body
    ).execute()
    fake.wait_for_state(f"{PARENT}/queuedResources/{node_id}-qr", "ACTIVE", timeout=10)
    node: dict[str, Any] = client.nodes().get(name=f"{PARENT}/nodes/{node_id}").execute()
    return node


def host_key(fake: FakeTpuApi, node_id: str, timeout: float = 20) -> str:
    """`TYPE BLOB` from the node's guest attributes, as components/vm/host_key.py reads it."""
    nodes = api(fake).projects().locations().nodes()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = nodes.getGuestAttributes(
            name=f"{PARENT}/nodes/{node_id}", body={"queryPath": "hostkeys/"}
        ).execute()
        for attribute in answer.get("guestAttributes", []):
            for item in attribute["queryValue"]["items"]:
                return f"{item['key']} {item['value']}"
        time.sleep(0.1)
    raise AssertionError("the node never published a host key")


def ssh(address: str, key: Path, pinned: str, command: str, tmp_path: Path) -> Any:
    known = tmp_path / f"known-{address}"
    known.write_text(f"{address} {pinned}\n")
    return subprocess.run(
        ["ssh", "-F", "/dev/null", "-T", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}",
         "-o", "ConnectTimeout=5", "-i", str(key), f"tpu-vllm@{address}", command],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def metadata(public_key: str, **extra: str) -> dict[str, str]:
    return {
        "ssh-keys": f"tpu-vllm:{public_key} tpu-vllm",
        "enable-guest-attributes": "TRUE",
        "enable-oslogin": "FALSE",
        **extra,
    }


def wait_ssh(address: str, key: Path, pinned: str, tmp_path: Path) -> Any:
    """Dial until the guest agent has created the account (as pulumi-command retries)."""
    for _ in range(100):
        done = ssh(address, key, pinned, "id -un; echo $HOME", tmp_path)
        if done.returncode == 0:
            return done
        time.sleep(0.1)
    raise AssertionError(f"never got in: {done.stderr}")


def test_a_node_is_a_vm_at_its_external_ip_with_the_metadata_login_and_host_key(
    fleet: tuple[FakeTpuApi, TpuVmFleet], client_key: tuple[Path, str], tmp_path: Path
) -> None:
    fake, machines = fleet
    key, public = client_key
    node = request_node(fake, "node-a", metadata(public))
    address = node["networkEndpoints"][0]["accessConfig"]["externalIp"]
    assert address.startswith(tpu_vm.ADDRESS_PREFIX)
    pinned = host_key(fake, "node-a")
    assert pinned == machines.vm(address).host_public_key
    done = wait_ssh(address, key, pinned, tmp_path)
    assert done.stdout.split()[0] == "tpu-vllm"
    # The user exists only inside the VM.
    assert subprocess.run(["id", "tpu-vllm"], capture_output=True, check=False).returncode != 0
    # Another host key is refused: the pin means something.
    wrong = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    assert wrong.returncode == 0
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    refused = ssh(address, key, other, "true", tmp_path)
    assert refused.returncode != 0 and "host key" in refused.stderr.lower()


def test_two_nodes_serve_the_same_port_each_on_its_own_loopback(
    fleet: tuple[FakeTpuApi, TpuVmFleet],
    client_key: tuple[Path, str],
    tmp_path: Path,
    fake_metadata: FakeMetadataServer,
) -> None:
    fake, _ = fleet
    key, public = client_key
    addresses = []
    for name in ("node-a", "node-b"):
        node = request_node(fake, name, metadata(public))
        address = node["networkEndpoints"][0]["accessConfig"]["externalIp"]
        pinned = host_key(fake, name)
        wait_ssh(address, key, pinned, tmp_path)
        # A server on the VM's own 127.0.0.1:8000, as vLLM's readiness check asks it there.
        serve = (
            f"mkdir -p ~/www; echo {name} > ~/www/who; cd ~/www; "
            f"python3 -m http.server {SERVING_PORT} --bind 127.0.0.1 "
            ">/dev/null 2>&1 </dev/null & "
            f"for i in $(seq 50); do curl -sf http://127.0.0.1:{SERVING_PORT}/who && break; "
            "sleep 0.1; done"
        )
        started = ssh(address, key, pinned, serve, tmp_path)
        assert started.stdout.strip() == name, started.stderr
        # The loopback fakes answer inside the VM at the address the VM was given.
        token = ssh(
            address, key, pinned,
            "curl -sf -H 'Metadata-Flavor: Google' "
            "http://$GCE_METADATA_HOST/computeMetadata/v1/instance/service-accounts/default/token",
            tmp_path,
        )  # fmt: skip
        assert '"access_token"' in token.stdout, token.stderr
        addresses.append((name, address))
    assert addresses[0][1] != addresses[1][1]
    for name, address in addresses:  # from outside, each address reaches its own VM
        with socket.create_connection((address, SERVING_PORT), timeout=5) as sock:
            sock.sendall(b"GET /who HTTP/1.0\r\n\r\n")
            assert sock.makefile("rb").read().decode().rstrip().endswith(name)


def test_a_deleted_or_ended_node_leaves_nothing_at_its_address(
    fleet: tuple[FakeTpuApi, TpuVmFleet], client_key: tuple[Path, str], tmp_path: Path
) -> None:
    fake, machines = fleet
    key, public = client_key
    client = api(fake).projects().locations()
    for name, end in (("node-a", "delete"), ("node-b", "expire")):
        node = request_node(fake, name, metadata(public))
        address = node["networkEndpoints"][0]["accessConfig"]["externalIp"]
        vm = machines.vm(address)
        wait_ssh(address, key, host_key(fake, name), tmp_path)
        qr = f"{PARENT}/queuedResources/{name}-qr"
        if end == "delete":
            client.queuedResources().delete(name=qr, force=True).execute()
        else:
            fake.expire(qr)  # the run ends; the ticker moves the fake on by itself
        deadline = time.monotonic() + 10
        while address in machines.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert address not in machines.running
        with pytest.raises(OSError):
            socket.create_connection((address, 22), timeout=2).close()
        machines.wait_settled()
        assert not vm.workdir.exists()


def test_os_login_on_means_no_account_from_ssh_keys() -> None:
    """guest-agent: with OS Login enabled no account is created from `ssh-keys`."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA"
    assert guest_accounts({"ssh-keys": f"tpu-vllm:{key} c"}) == {"tpu-vllm": [f"{key} c"]}
    assert guest_accounts({"ssh-keys": f"tpu-vllm:{key}", "enable-oslogin": "TRUE"}) == {}
    assert guest_accounts({"ssh-keys": "garbage\nu:not-a-key"}) == {}
