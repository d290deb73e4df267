"""Tests of the real-SSH harness itself: sshd, fake docker/sudo, log replay, fake vLLM HTTP.

Why: the remote-script tests are only worth something if this harness is real (an actual sshd,
an actual exec request, processes that really outlive the session) and if it can fail (wrong
host key, missing sudo, crash logs, bad bearer key). Each test below pins one of those facts.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.fakes import fake_docker
from tests.support.fakes.loopback import free_port

if TYPE_CHECKING:  # imported for real by pytest_plugins, so pytest can assert-rewrite it
    from tests.support.fakes.ssh_host import SshHost, SshHostFactory

pytest_plugins = ("tests.support.fakes.ssh_host",)

IMAGE = "vllm/vllm-tpu:nightly"
MODEL = "google/gemma-4-E2B-it"
API_KEY = "test-api-key-3f1c"


def _docker_run(name: str, port: int, *, extra: str = "") -> str:
    """The seed-000 ``docker run`` shape, with the API key mounted read-only from a file."""
    return (
        f"sudo docker run -d --name {name} --privileged --net=host "
        "-v /dev/shm:/dev/shm --shm-size 10gb -v ~/.cache/vllm:/root/.cache/vllm "
        "-v ~/.vllm_api_key:/run/secrets/vllm_api_key:ro -e HF_HOME=/dev/shm "
        f"{extra} {IMAGE} vllm serve {MODEL} --max-model-len 32768 --port {port}"
    )


def _http(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture
def vm(ssh_host_factory: SshHostFactory) -> SshHost:
    """A host with the image already pulled and the API key file in place."""
    host = ssh_host_factory(images_present=[IMAGE])
    done = host.run("umask 077; cat > ~/.vllm_api_key", stdin=API_KEY.encode() + b"\n")
    assert done.returncode == 0, done.stderr
    return host


def test_command_runs_over_real_sshd_as_isolated_user(ssh_host: SshHost) -> None:
    command = 'printf \'%s|\' "$HOME" "$(pwd)" "$(id -un)" \'a  b$c\' ~; mkdir -p ~/.cache/vllm'
    done = ssh_host.run(command)
    assert done.returncode == 0, done.stderr
    home = str(ssh_host.home)
    home_var, cwd, user, literal, tilde, _ = done.stdout.decode().split("|")
    assert (home_var, user, literal, tilde) == (home, ssh_host.user, "a  b$c", home)
    if os.getuid() == 0:  # dedicated user: the working directory is isolated too
        assert cwd == home
    assert (ssh_host.home / ".cache" / "vllm").is_dir()
    log = ssh_host.sshd_log.read_text()
    assert f"Accepted publickey for {ssh_host.user} from 127.0.0.1" in log
    assert ssh_host.client_private_key_openssh.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert re.fullmatch(r"ssh-ed25519 AAAA[0-9A-Za-z+/=]+", ssh_host.host_public_key)


def test_exit_code_stderr_and_stdin_pass_through(ssh_host: SshHost) -> None:
    done = ssh_host.run("cat > ~/in; wc -c < ~/in; echo oops >&2; exit 3", stdin=b"secret\n")
    assert (done.returncode, done.stdout.strip(), done.stderr.strip()) == (3, b"7", b"oops")
    assert (ssh_host.home / "in").read_bytes() == b"secret\n"


def test_wrong_pinned_host_key_is_refused(ssh_host: SshHost, tmp_path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
        check=True,
        capture_output=True,
    )
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    refused = ssh_host.run("touch ~/should-not-exist", host_key=other)
    assert refused.returncode == 255
    assert b"Host key verification failed" in refused.stderr
    assert not (ssh_host.home / "should-not-exist").exists()
    assert ssh_host.run("true", host_key=ssh_host.host_public_key).returncode == 0


def test_per_test_env_is_set_by_sshd_and_sudo_resets_the_rest(
    ssh_host_factory: SshHostFactory,
) -> None:
    host = ssh_host_factory(env={"GCE_METADATA_HOST": "127.0.0.1:1234"})
    done = host.run(
        "export LEAKY=from-shell; echo $GCE_METADATA_HOST; "
        "sudo sh -c 'echo ${LEAKY:-unset} $GCE_METADATA_HOST $USER $SUDO_USER'; docker ps"
    )
    assert done.stdout.decode().splitlines() == [
        "127.0.0.1:1234",
        f"unset 127.0.0.1:1234 root {host.user}",
    ]
    # Plain `docker` (no sudo) hits the root-only socket, as for a non-docker-group user.
    assert done.returncode == 1
    assert b"permission denied while trying to connect to the Docker daemon socket" in done.stderr
    assert host.run("sudo docker ps -q").returncode == 0


def test_run_follow_inspect_and_http_of_a_ready_container(vm: SshHost) -> None:
    vm.docker.set_scenario("v5e1_ready.log", speed=4000)
    port = free_port()
    started = vm.run(_docker_run("vllm-test", port))
    assert started.returncode == 0, started.stderr
    cid = started.stdout.decode().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", cid)

    follower = vm.popen("sudo docker logs -f vllm-test 2>&1")
    assert follower.stdout is not None
    seen: list[str] = []
    for raw in follower.stdout:
        seen.append(raw.decode())
        if "Application startup complete." in seen[-1]:
            break
    follower.kill()
    text = "".join(seen)
    assert (
        "Memory statistics | total_hbm_limit_gb=15.75GiB | total_hbm_limit_cap_gb=14.49GiB | "
        "total_hbm_used_gb=8.97GiB | total_hbm_avail_gb=5.52GiB"
    ) in text
    assert text.index("Init kv-cache") < text.index("Application startup complete.")
    assert f"Starting vLLM API server 0 on http://0.0.0.0:{port}" in text
    vm.docker.wait_ready("vllm-test")

    fmt = "{{.Id}} {{.State.Status}} {{.State.Running}} {{.State.ExitCode}} {{.RestartCount}}"
    inspected = vm.run(f"sudo docker inspect --format '{fmt}' vllm-test")
    assert inspected.stdout.decode() == f"{cid} running true 0 0\n"
    full = json.loads(vm.run("sudo docker inspect vllm-test").stdout)
    assert full[0]["Name"] == "/vllm-test"
    assert full[0]["HostConfig"]["Privileged"] is True
    assert full[0]["HostConfig"]["NetworkMode"] == "host"
    assert full[0]["HostConfig"]["ShmSize"] == 10 * 1024**3
    assert f"{vm.home}/.vllm_api_key:/run/secrets/vllm_api_key:ro" in full[0]["HostConfig"]["Binds"]
    assert full[0]["Config"]["Cmd"][:3] == ["vllm", "serve", MODEL]
    assert "HF_HOME=/dev/shm" in full[0]["Config"]["Env"]
    ps = vm.run("sudo docker ps -a --filter name=^vllm-test$ --format '{{.ID}}'")
    assert ps.stdout.decode() == cid[:12] + "\n"
    # uvicorn's lifecycle lines are on stderr: without 2>&1 a grep for them finds nothing.
    stdout_only = vm.run("sudo docker logs vllm-test 2>/dev/null").stdout.decode()
    assert "Memory statistics" in stdout_only
    assert "Application startup complete." not in stdout_only

    assert _http(port, "/health")[0] == 200
    assert _http(port, "/v1/models")[0] == 401
    assert _http(port, "/v1/models", token="wrong")[0] == 401
    status, body = _http(port, "/v1/models", token=API_KEY)
    assert status == 200
    assert json.loads(body)["data"][0]["id"] == MODEL


def test_port_is_refused_until_startup_completes(vm: SshHost) -> None:
    vm.docker.set_scenario("hang.log", speed=1000)
    port = free_port()
    assert vm.run(_docker_run("vllm-hang", port)).returncode == 0
    vm.docker.wait_for("vllm-hang", lambda i: "Precompile backbone" in vm.docker.logs("vllm-hang"))
    with pytest.raises(ConnectionRefusedError):
        _http(port, "/health")
    assert vm.docker.inspect("vllm-hang") is not None
    assert not vm.docker.is_ready("vllm-hang")


def test_crash_fixture_exits_1_and_logs_follow_returns(vm: SshHost) -> None:
    vm.docker.set_scenario("crash_kv_dtype.log", speed=400)
    port = free_port()
    run = _docker_run("vllm-crash", port, extra="")
    run = run.replace("--max-model-len 32768", "--kv-cache-dtype int8_per_token_head")
    assert vm.run(run).returncode == 0
    followed = vm.run("sudo docker logs -f vllm-crash 2>&1", timeout=20)
    assert followed.returncode == 0
    assert b"ValueError: Unsupported kv cache dtype: int8_per_token_head" in followed.stdout
    assert b"Application startup complete." not in followed.stdout
    state = vm.run("sudo docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' vllm-crash")
    assert state.stdout == b"exited 1\n"
    with pytest.raises(ConnectionRefusedError):
        _http(port, "/health")


def test_rm_f_kills_the_container_and_mimics_docker_errors(vm: SshHost) -> None:
    vm.docker.set_scenario("hang.log", speed=1.0)
    assert vm.run(_docker_run("vllm-rm", free_port())).returncode == 0
    pid = vm.docker.wait_status("vllm-rm", "running")["State"]["Pid"]
    assert fake_docker.pid_alive(pid)
    conflict = vm.run(_docker_run("vllm-rm", free_port()))
    assert conflict.returncode == 125
    assert b'Conflict. The container name "/vllm-rm" is already in use' in conflict.stderr
    busy = vm.run("sudo docker rm vllm-rm")
    assert busy.returncode == 1
    assert b"container is running" in busy.stderr

    removed = vm.run("sudo docker rm -f vllm-rm")
    assert (removed.returncode, removed.stdout) == (0, b"vllm-rm\n")
    assert not fake_docker.pid_alive(pid)
    gone = vm.run("sudo docker inspect vllm-rm")
    assert (gone.returncode, gone.stdout, gone.stderr) == (
        1,
        b"[]\n",
        b"Error: No such object: vllm-rm\n",
    )
    # docker CLI >= 24: `rm -f` of a missing container reports it but exits 0; plain rm fails.
    again = vm.run("sudo docker rm -f vllm-rm")
    assert again.returncode == 0
    assert again.stderr == b"Error response from daemon: No such container: vllm-rm\n"
    assert vm.run("sudo docker rm vllm-rm").returncode == 1


def test_invocations_record_argv_env_and_cwd(vm: SshHost) -> None:
    vm.docker.set_scenario("hang.log", speed=1.0)
    sentinel = "hf_SENTINEL_0123456789"
    run = _docker_run("vllm-rec", free_port(), extra=f"-e HF_TOKEN={sentinel}")
    done = vm.run(f"export SHELL_ONLY={sentinel}-shell; {run}")
    assert done.returncode == 0, done.stderr
    sudo_call, docker_call = vm.docker.invocations(tool=None)[-2:]
    assert sudo_call["tool"] == "sudo"
    assert sudo_call["env"]["SHELL_ONLY"] == f"{sentinel}-shell"
    assert docker_call["argv"][:3] == ["docker", "run", "-d"]
    assert f"HF_TOKEN={sentinel}" in docker_call["argv"]
    assert "SHELL_ONLY" not in docker_call["env"]  # sudo's env_reset dropped it
    assert docker_call["env"]["SUDO_USER"] == vm.user
    if os.getuid() == 0:  # as root the harness isolates the working directory as well
        assert docker_call["cwd"] == str(vm.home)
    # The leak is visible where it would be on the VM: inspect and the container's environ.
    inspected = vm.docker.inspect("vllm-rec")
    assert inspected is not None
    assert f"HF_TOKEN={sentinel}" in inspected["Config"]["Env"]
    environ = Path(f"/proc/{inspected['State']['Pid']}/environ").read_bytes()
    assert f"HF_TOKEN={sentinel}".encode() in environ


def test_container_outlives_the_ssh_session_that_started_it(vm: SshHost) -> None:
    vm.docker.set_scenario("v5e1_ready.log", speed=1500)
    port = free_port()
    started = time.monotonic()
    done = vm.run(_docker_run("vllm-bg", port))
    assert done.returncode == 0
    assert time.monotonic() - started < 5  # the session closed without waiting for the boot
    vm.docker.wait_ready("vllm-bg", timeout=15)  # ~0.6 s of replay after the session ended
    pid = vm.docker.inspect("vllm-bg")["State"]["Pid"]  # type: ignore[index]
    assert os.getsid(pid) == pid  # its own session: no SIGHUP from sshd
    assert _http(port, "/health")[0] == 200


def test_restart_knob_bumps_restart_count_and_ends_logs_follow(vm: SshHost) -> None:
    vm.docker.set_scenario("v5e1_ready.log", speed=4000)
    port = free_port()
    assert vm.run(_docker_run("vllm-rs", port)).returncode == 0
    vm.docker.wait_ready("vllm-rs")
    before = vm.docker.inspect("vllm-rs")
    assert before is not None
    follower = vm.popen("sudo docker logs -f vllm-rs")
    assert follower.stdout is not None
    assert follower.stdout.readline()  # following the first run before it restarts
    vm.docker.restart("vllm-rs")
    after = vm.docker.wait_for("vllm-rs", lambda i: i["RestartCount"] == 1, what="restart")
    assert after["State"]["StartedAt"] != before["State"]["StartedAt"]
    follower.communicate(timeout=10)
    assert follower.returncode == 0  # json-file follow ends when the run it follows stops
    vm.docker.wait_ready("vllm-rs")
    assert vm.docker.logs("vllm-rs").count("Application startup complete.") == 2
    assert _http(port, "/health")[0] == 200


def test_silent_exit_and_next_scenario_for_a_second_run(vm: SshHost) -> None:
    vm.docker.set_scenarios(
        [
            {"log": "v5e1_ready.log", "speed": 1000, "exit_at": 20.0, "exit_code": 137},
            {"log": "v5e1_ready.log", "speed": 4000},
        ]
    )
    port = free_port()
    assert vm.run(_docker_run("vllm-2x", port)).returncode == 0
    exited = vm.docker.wait_status("vllm-2x", "exited")
    assert exited["State"]["ExitCode"] == 137
    assert "Error" not in vm.docker.logs("vllm-2x")
    assert vm.run("sudo docker rm -f vllm-2x && " + _docker_run("vllm-2x", port)).returncode == 0
    vm.docker.wait_ready("vllm-2x")
    assert _http(port, "/health")[0] == 200


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{.Config.Env}}", "[A=1 B=two words]"),
        ("{{json .Config.Env}}", '["A=1","B=two words"]'),
        ("{{json .HostConfig.Binds}}", "null"),
        ("{{.HostConfig.Binds}}", "[]"),
        ("{{range .Config.Env}}{{println .}}{{end}}", "A=1\nB=two words\n"),
        ("{{if .State.Running}}up{{else}}down{{end}}", "up"),
        ('{{index .Config.Labels "x"}}', ""),
    ],
)
def test_inspect_templates_print_like_go(template: str, expected: str) -> None:
    data = {
        "State": {"Running": True},
        "HostConfig": {"Binds": None},
        "Config": {"Env": ["A=1", "B=two words"], "Labels": {}},
    }
    assert fake_docker.render_template(template, data) == expected


def test_template_and_flag_errors_use_docker_wording() -> None:
    with pytest.raises(fake_docker.TemplateError, match=r"at <\.Config\.Foo>: map has no entry"):
        fake_docker.render_template("{{.Config.Foo}}", {"Config": {}})
    with pytest.raises(fake_docker.CliError) as unknown:
        fake_docker.parse_flags(
            "run", fake_docker.RUN_USAGE, ["--bogus", "img"], fake_docker.RUN_FLAGS,
            interspersed=False,
        )  # fmt: skip
    assert unknown.value.code == 125
    assert unknown.value.message.startswith("unknown flag: --bogus\n\nUsage:  docker run")
    flags, rest = fake_docker.parse_flags(
        "run", fake_docker.RUN_USAGE, shlex.split("-dit -eA=1 --net host -v/a:/b img x"),
        fake_docker.RUN_FLAGS, interspersed=False, aliases=fake_docker.RUN_ALIASES,
    )  # fmt: skip
    assert rest == ["img", "x"]
    assert ("network", "host") in flags
    assert ("env", "A=1") in flags
    assert ("volume", "/a:/b") in flags


def test_a_scenario_can_follow_the_servers_flags(tmp_path: Path) -> None:
    """`by_args`: the run whose command holds the words replays their scenario; others the
    default, so a crash that comes from one flag goes away when the flag is fixed."""
    daemon = fake_docker.Daemon(tmp_path)
    oom = {"log": "crash_hbm_oom.log", "speed": 500}
    fake_docker.write_json_atomic(
        tmp_path / "scenario.json",
        {"log": "v5e1_ready.log", "by_args": [[["--gpu-memory-utilization", "0.98"], oom]]},
    )
    serve = ["vllm", "serve", MODEL, "--dtype", "bfloat16"]
    bad = daemon.next_scenario([*serve, "--gpu-memory-utilization", "0.98"])
    assert bad["log"] == "crash_hbm_oom.log" and "by_args" not in bad
    good = daemon.next_scenario([*serve, "--gpu-memory-utilization", "0.92"])
    assert good["log"] == "v5e1_ready.log" and "by_args" not in good
    # The words must be consecutive: a value elsewhere does not match.
    apart = daemon.next_scenario([*serve, "--gpu-memory-utilization", "0.9", "--x", "0.98"])
    assert apart["log"] == "v5e1_ready.log"


def _chat(port: int, body: Any) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("flags", ["--enable-auto-tool-choice --tool-call-parser gemma4", ""])
def test_a_tool_call_comes_back_parsed_only_with_auto_tool_choice(vm: SshHost, flags: str) -> None:
    """vLLM parses a tool call into `tool_calls` when started with `--enable-auto-tool-choice`
    and a `--tool-call-parser`; without them `tool_choice: auto` is a 400 (serving_chat.py)."""
    vm.docker.set_scenario("v5e1_ready.log", speed=4000)
    port = free_port()
    started = vm.run(_docker_run("vllm-tools", port) + f" {flags}")
    assert started.returncode == 0, started.stderr
    vm.docker.wait_ready("vllm-tools")
    city = {"city": {"type": "string"}}
    weather = {
        "name": "get_weather",
        "parameters": {"type": "object", "required": ["city"], "properties": city},
    }
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": weather}],
        "tool_choice": "auto",
    }
    status, answer = _chat(port, body)
    if not flags:
        assert status == 400 and "--enable-auto-tool-choice" in json.dumps(answer)
        return
    assert status == 200
    [choice] = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    plain = _chat(port, {"model": MODEL, "messages": body["messages"]})[1]
    assert plain["choices"][0]["message"]["tool_calls"] == []
