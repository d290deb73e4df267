"""The VM's container log to Cloud Logging, over real SSH with the fake docker.

The start command runs `docker run --log-driver gcplogs ...` (components/vm/node_scripts.py
`log_flags`); the fake docker treats the flags as dockerd does (moby daemon/logger: options
validated per driver at create, the driver's start-time ping to Cloud Logging, dual logging's
local cache so `docker logs` still reads the container) and writes what gcplogs would ship to
its fake Cloud Logging. So these tests prove: the readiness check, which follows `docker logs`,
still works; every line leaves the node with the stack's label, which the `logs_command` filter
names; a Cloud Logging refusal is waited out, then the server starts anyway with a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from components import log_links
from components.vm import node_scripts
from components.vm.vllm import CONTAINER
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost, SshHostFactory
from tests.support.remote_stack import FETCH, Readiness, commands, node_with_secrets, on_host, start
from tests.support.stack_config import config_for

REFUSED = "rpc error: code = PermissionDenied desc = The caller does not have permission"


@pytest.fixture
def node(
    ssh_host_factory: SshHostFactory,
    fake_secret_manager: FakeSecretManager,
    fake_metadata: FakeMetadataServer,
) -> Iterator[SshHost]:
    host, version = node_with_secrets(
        ssh_host_factory, fake_secret_manager, fake_metadata, hf_token=b"hf_test", api_key=b"key-1"
    )
    fetched = host.run(commands("v5e1", api_key_version=version)[FETCH])
    assert fetched.returncode == 0, fetched.stderr.decode()
    yield host


def run_args(node: SshHost, container_id: str) -> dict[str, Any]:
    record = node.docker.container(container_id)
    assert record is not None
    config: dict[str, Any] = record.config
    return config


def test_the_log_goes_to_cloud_logging_and_docker_logs_still_reads_it(node: SshHost) -> None:
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    container_id = start(node)
    assert run_args(node, container_id)["LogConfig"] == {
        "Type": "gcplogs", "Config": {"labels": log_links.STACK_LABEL}
    }  # fmt: skip
    readiness = Readiness(node, container_id, None)
    assert readiness.wait() == 0, readiness.stdout + readiness.stderr.decode()
    assert "ready: Application startup complete." in readiness.stdout
    shipped = node.docker.cloud_logging()
    assert any("Application startup complete." in e["jsonPayload"]["message"] for e in shipped)
    for entry in shipped:
        # What the stack's `logs_command` filter selects (components/log_links.py).
        assert entry["logName"] == log_links.GCPLOGS_LOG_NAME
        assert entry["jsonPayload"]["container"]["metadata"] == {log_links.STACK_LABEL: "v5e1"}
    assert 'jsonPayload.container.metadata.tpu_vllm_stack="v5e1"' in log_links.vm_filter(
        "p", "v5e1"
    )


def test_without_monitoring_the_container_keeps_dockers_default_driver(node: SshHost) -> None:
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    container_id = start(node, {"tpu-vllm:monitoring.enabled": False})
    assert run_args(node, container_id)["LogConfig"]["Type"] == "json-file"
    assert node.docker.cloud_logging() == []


def _start_script(node: SshHost, wait: int, retry: float) -> str:
    config = config_for("v5e1", on_host(node))
    return node_scripts.start_server_script(config, CONTAINER, wait, retry)


def test_a_refusal_is_waited_out_then_the_log_is_shipped(node: SshHost) -> None:
    """Cloud Logging refuses the first two starts (a fresh logWriter grant propagating)."""
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    node.docker.set_gcplogs_error(REFUSED, failures=2)
    done = node.run(_start_script(node, wait=30, retry=0.2))
    assert done.returncode == 0, done.stderr.decode()
    err = done.stderr.decode()
    assert err.count("Cloud Logging refused the container's log driver; retrying") == 2
    assert "failed to initialize logging driver" in err
    container_id = done.stdout.decode().strip().splitlines()[-1]
    assert run_args(node, container_id)["LogConfig"]["Type"] == "gcplogs"
    readiness = Readiness(node, container_id, None)
    assert readiness.wait() == 0, readiness.stdout + readiness.stderr.decode()
    assert node.docker.cloud_logging()


def test_a_lasting_refusal_starts_the_server_with_the_default_driver_and_a_warning(
    node: SshHost,
) -> None:
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    node.docker.set_gcplogs_error(REFUSED)
    done = node.run(_start_script(node, wait=1, retry=0.3))
    assert done.returncode == 0, done.stderr.decode()
    assert "starting the server with Docker's default log driver" in done.stderr.decode()
    container_id = done.stdout.decode().strip().splitlines()[-1]
    assert run_args(node, container_id)["LogConfig"]["Type"] == "json-file"
    readiness = Readiness(node, container_id, None)
    assert readiness.wait() == 0, readiness.stdout + readiness.stderr.decode()


def test_another_docker_run_failure_still_fails_the_start(node: SshHost) -> None:
    node.docker.set_scenario("no-such-boot.log")  # the fake's own refusal, exit 125
    done = node.run(_start_script(node, wait=30, retry=0.2))
    assert done.returncode == 1
    assert "unusable scenario" in done.stderr.decode()
    assert "retrying" not in done.stderr.decode()


def test_the_fake_refuses_what_dockerd_refuses(node: SshHost) -> None:
    """moby: an unknown gcplogs option fails the create (exit 125); with the cache disabled a
    gcplogs container cannot be read back."""
    bad = node.run("sudo docker run -d --log-driver gcplogs --log-opt gcp-labels=x busybox true")
    assert bad.returncode == 125
    assert '"gcp-labels" is not a valid option for the gcplogs driver' in bad.stderr.decode()
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    done = node.run(
        "sudo docker run -d --name nocache --log-driver gcplogs --log-opt cache-disabled=true "
        f"--net=host vllm/vllm-tpu:nightly vllm serve m --port {node.vllm_port}"
    )
    assert done.returncode == 0, done.stderr.decode()
    logs = node.run("sudo docker logs nocache")
    assert logs.returncode == 1
    assert "configured logging driver does not support reading" in logs.stderr.decode()
