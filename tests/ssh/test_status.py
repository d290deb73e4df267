"""`scripts/status.py STACK` against the fakes: a fake `pulumi` CLI for the outputs, the loopback
TPU API for the queued resource, the fake vLLM server for /health, /v1/models and /metrics (the
vLLM 0.32 sample, its token counters counting what it served), and a real sshd with the fake
docker for the container's log. A node that does not answer gets a line saying so, in bounded
time; no secret is printed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scripts import status
from tests.support.fakes.fake_docker import metrics_page
from tests.support.fakes.fake_pulumi import FakePulumi
from tests.support.fakes.openai_server import FakeOpenAI
from tests.support.fakes.ssh_host import SshHost
from tests.support.fakes.tpu_api import FakeTpuApi
from tests.support.queued_resource_states import in_state

STACK = "v5e1"
SECRET = "STATUSAPIKEYSENTINEL0123456789"
SSH_SECRET = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nSTATUSSSHKEYSENTINEL\n-----END OPENSSH PRIVATE KEY-----\n"
)


def outputs(base: str, queued_resource: str, **extra: Any) -> dict[str, Any]:
    return {
        "endpoint": base,
        "endpoint_ip": base,
        "api_key": SECRET,
        "chip": "v5litepod-1",
        "queued_resource": queued_resource,
        "expires_at": "2099-01-01T00:00:00Z",
        "renewal_lead_seconds": 4800,
        "external_ip": "",
        "ssh_private_key": SSH_SECRET,
        "dashboard_url": "https://console.cloud.google.com/monitoring/dashboards/builder/abc?project=p",
        "logs_command": "gcloud logging read 'x' --project=p",
        "cluster": "",
        **extra,
    }


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = status.main([STACK, *args])
    out, err = capfd.readouterr()
    assert SECRET not in out + err and "STATUSSSHKEYSENTINEL" not in out + err
    return code, out


def test_a_serving_stack_in_one_screen(
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    fake_openai: FakeOpenAI,
    capfd: pytest.CaptureFixture[str],
) -> None:
    fake_openai.api_key = SECRET
    name = in_state(manual_tpu, "ACTIVE")
    fake_pulumi.add_stack(
        STACK, outputs(fake_openai.url, name), secrets=("api_key", "ssh_private_key")
    )

    def serve_during_the_window(seconds: float) -> None:
        # Ten chat completions between the two scrapes (17 + 7 tokens each, the fake's usage).
        for _ in range(10):
            fake_openai._usage(17, 7)

    code = status.status(STACK, timeout=2, window=10, sleep=serve_during_the_window)
    out = capfd.readouterr().out
    assert code == 0
    assert "TPU: v5litepod-1 tpu-vllm-v5e1: ACTIVE" in out
    assert "left)" in out and "renewal starts:" in out
    assert "/health: 200" in out
    assert f"model: {fake_openai.model}" in out
    assert "requests: 0 running, 0 waiting; KV cache 0.0 %" in out
    assert "tokens/s: 17.0 prompt, 7.0 generation (over the last 10 s)" in out
    assert "dashboard: https://console.cloud.google.com/monitoring/dashboards/builder/abc" in out
    assert "startup phase: unknown (no node address" in out
    assert SECRET not in out


def test_the_average_since_start_says_so(
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    fake_openai: FakeOpenAI,
    capfd: pytest.CaptureFixture[str],
) -> None:
    fake_openai.api_key = SECRET
    fake_pulumi.add_stack(
        STACK, outputs(fake_openai.url, in_state(manual_tpu, "ACTIVE")), secrets=("api_key",)
    )
    code, out = run(capfd, "--window", "0", "--timeout", "2")
    assert code == 0 and "average since the server started" in out


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A node that accepts connections and never answers (a hung VM, a dropped route)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_node_that_does_not_answer_gets_a_line_in_bounded_time(
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    silent_port: int,
    capfd: pytest.CaptureFixture[str],
) -> None:
    base = f"http://127.0.0.1:{silent_port}"
    fake_pulumi.add_stack(
        STACK,
        outputs(base, in_state(manual_tpu, "ACTIVE"), external_ip="127.0.0.1", ssh_host_key=""),
        secrets=("api_key", "ssh_private_key"),
    )
    began = time.monotonic()
    code, out = run(capfd, "--timeout", "0.5", "--window", "1", "--ssh-port", str(silent_port))
    assert code == 0
    assert "/health: no answer in 0.5 s" in out
    assert "model: /v1/models no answer in 0.5 s" in out
    assert "metrics: /metrics no answer in 0.5 s" in out
    assert "startup phase: unknown (" in out
    assert time.monotonic() - began < 30


def test_an_ended_run_and_a_gone_request(
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    silent_port: int,
    capfd: pytest.CaptureFixture[str],
) -> None:
    gone = "projects/test-project/locations/us-west4-a/queuedResources/tpu-vllm-v5e1"
    fake_pulumi.add_stack(
        STACK, outputs("", gone, expires_at="2020-01-01T00:00:00Z"), secrets=("api_key",)
    )
    _, out = run(capfd, "--timeout", "0.5")
    assert "gone (404)" in out and "run ended: 2020-01-01T00:00:00Z" in out
    assert "endpoint: none in the outputs" in out


def test_no_outputs_is_exit_2(fake_pulumi: FakePulumi, capfd: pytest.CaptureFixture[str]) -> None:
    code, out = run(capfd)
    assert code == status.EXIT_NO_OUTPUTS and "could not be read" in out


def test_the_startup_phase_comes_from_the_containers_log_over_ssh(
    ssh_host: SshHost,
    manual_tpu: FakeTpuApi,
    fake_pulumi: FakePulumi,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # slow_compile.log at 20x: 3 s in, it is compiling (its one long XLA compile).
    ssh_host.docker.set_scenario("slow_compile.log", speed=20)
    started = ssh_host.run(
        "sudo docker run -d --name tpu-vllm --net=host vllm/vllm-tpu:nightly vllm serve m "
        f"--port {ssh_host.vllm_port}"
    )
    assert started.returncode == 0, started.stderr.decode()
    time.sleep(4)
    key = ssh_host.connection_kwargs()["private_key"]
    fake_pulumi.add_stack(
        STACK,
        outputs(
            "",
            in_state(manual_tpu, "ACTIVE"),
            external_ip="127.0.0.1",
            ssh_private_key=key,
            ssh_host_key=ssh_host.host_public_key,
        ),
        secrets=("api_key", "ssh_private_key"),
    )
    code, out = run(capfd, "--timeout", "2", "--ssh-port", str(ssh_host.port),
                    "--ssh-user", ssh_host.user)  # fmt: skip
    assert code == 0
    assert "startup phase: compiling (the long part: XLA)" in out
    assert key.strip().splitlines()[1] not in out


@pytest.fixture
def two_replicas() -> Iterator[str]:
    """One address in front of two vLLM servers, as GKE's load balancer is: each /metrics goes
    to the other replica (its own process, start time and counters)."""
    pages = []
    for started, tokens in ((1.7961e09, (100.0, 50.0)), (1.7962e09, (10.0, 5.0))):
        page = metrics_page("google/gemma-4-31B-it", *tokens)
        pages.append(page.replace("1.79615687225e+09", f"{started:.6e}"))
    turn = iter(range(1_000_000))

    class Balancer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages[next(turn) % 2].encode() if self.path == "/metrics" else b"OK"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Balancer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()
    server.server_close()


def test_on_gke_a_scrape_is_one_replicas_and_two_replicas_are_not_subtracted(
    two_replicas: str,
) -> None:
    """Counters of two processes do not subtract: the second scrape's server started at another
    time, so no (negative) tokens/s is printed, and the snapshot says whose it is."""
    lines = status.endpoint_lines(
        outputs(two_replicas, "", cluster="projects/p/locations/l/clusters/c"),
        timeout=2,
        window=1,
        sleep=lambda _seconds: None,
    )
    text = "\n".join(lines)
    assert "(one replica's: the load balancer picked it)" in text
    assert "tokens/s: not measured: another server process answered the second scrape" in text
