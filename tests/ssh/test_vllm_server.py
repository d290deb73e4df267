"""VllmServer over real SSH: the rendered start and readiness commands against a fake docker.

The fake `docker` replays reconstructed vLLM boot logs (tests/support/fixtures/vllm_logs) at a
chosen speed, so an 857 s cold start takes under a second; the readiness command is the program's
own text, run exactly as `remote.Command` would send it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.vm.vllm import parse_ready
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHost, SshHostFactory
from tests.support.pulumi_program import TEST_PROJECT, run_program
from tests.support.remote_stack import (
    FETCH,
    READY,
    START,
    Readiness,
    commands,
    container_log,
    node_with_secrets,
    rfc3339,
    run_crash,
    start,
)
from tests.support.seed_facts import serve_flags as seed_000_serve_flags


@pytest.fixture
def node(
    ssh_host_factory: SshHostFactory,
    fake_secret_manager: FakeSecretManager,
    fake_metadata: FakeMetadataServer,
) -> Iterator[SshHost]:
    """An SSH "TPU VM" whose secrets have already been fetched."""
    host, version = node_with_secrets(
        ssh_host_factory, fake_secret_manager, fake_metadata, hf_token=b"hf_test", api_key=b"key-1"
    )
    fetched = host.run(commands("v5e1", api_key_version=version)[FETCH])
    assert fetched.returncode == 0, fetched.stderr.decode()
    yield host


def test_ready_is_detected_within_two_seconds_with_phases_and_hbm(node: SshHost) -> None:
    node.docker.set_scenario("v5e1_ready.log", speed=400)  # 857 s of boot in ~2 s
    container_id = start(node)
    readiness = Readiness(node, container_id, None)
    assert readiness.wait() == 0, readiness.stdout + readiness.stderr.decode()
    ready_line = next(
        r for r in container_log(node, container_id) if "startup complete" in r["log"]
    )
    detected = readiness.when("ready: Application startup complete.")
    assert detected - rfc3339(ready_line["time"]) < 2.0
    out = readiness.stdout
    for phase in (
        "image present",
        "weights downloaded",
        "Memory statistics (HBM budget)",
        "KV cache initialised",
        "compiling",
        "server starting",
        "/health: 200",
        "/v1/models lists google/gemma-4-E2B-it",
        'the model answered: "Hi there, nice to meet you!"',
        "the model called get_weather with a city",
    ):
        assert phase in out, phase
    # Phases carry elapsed seconds, in boot order.
    stamps = [int(m.group(1)) for m in re.finditer(r"^\[\s*(\d+)s\]", out, re.M)]
    assert stamps == sorted(stamps)
    result = parse_ready(out)
    assert result["hbm"] == {
        "total_gib": 15.75,
        "usable_gib": 14.49,
        "used_gib": 8.97,
        "available_gib": 5.52,
    }
    assert result["startup_seconds"] > 0
    assert 0 <= result["first_answer_seconds"] < 30
    # Both questions reached the server, with the key (a request without it is refused 401).
    access = [r["log"] for r in container_log(node, container_id) if "POST /v1/chat" in r["log"]]
    assert len(access) == 2 and all(line.rstrip().endswith("200 OK") for line in access), access


#: (the fake's answer, what the failure says): a build that starts but cannot answer.
CHAT = "did not answer 'Say hi in five words.': "
TOOL = "did not call get_weather: HTTP 200 "
BAD_ANSWERS = {
    "empty_content": CHAT + 'HTTP 200 with empty content (null; finish_reason "stop", 0 ',
    "reasoning_only": CHAT + 'HTTP 200 with empty content (null; finish_reason "length", 480 ',
    "garbage": CHAT + 'HTTP 200 with content that is no answer: "<pad><pad>',
    "http_500": CHAT + "HTTP 500",
    "hang": CHAT + "nothing answered (no answer within the time allowed)",
    "text_not_tool": TOOL + "without a tool call",
    "non_json_arguments": TOOL + "with a get_weather call whose arguments are not a JSON object",
    "empty_arguments": TOOL + 'with a get_weather call without a city: "{}"',
}


@pytest.mark.parametrize("answers", sorted(BAD_ANSWERS))
def test_a_server_that_starts_but_cannot_answer_fails_the_check(
    node: SshHost, answers: str
) -> None:
    """`Application startup complete.`, /health and /v1/models all fine, and yet the model
    cannot answer (tpu-inference #3414/#3406): readiness fails with the status, the start of
    the body and the container's last lines, and never shows the key."""
    node.docker.set_scenario("v5e1_ready.log", speed=400, answers=answers)
    container_id = start(node)
    readiness = Readiness(node, container_id, None, heartbeat=0.5, answer_timeout=3)
    assert readiness.wait(timeout=90) != 0, readiness.stdout
    out, err = readiness.stdout, readiness.stderr.decode()
    assert "/v1/models lists google/gemma-4-E2B-it" in out
    assert f"FAILED: the model {BAD_ANSWERS[answers]}" in out, out
    assert "TPU_VLLM_READY" not in out
    assert "log lines" in err and "Application startup complete." in err  # the container's tail
    assert "key-1" not in out + err
    if answers == "hang":  # the wait for an answer is not silent either
        assert "still waiting, phase: asking the model, waiting for its answer" in out, out
    if answers == "http_500":
        assert '"message":"Internal server error"' in out  # the body's start, quoted


def test_heartbeat_lines_fill_a_long_silent_compile(node: SshHost) -> None:
    """600 s of silence (8 s at 75x) with a 0.25 s heartbeat: lines keep coming, each with
    the elapsed time, the phase and the log's last line. 8 s, not less: on two loaded cores
    (the suite under xdist) each beat's SSH round trip can take most of a second, and four
    beats must still fit."""
    node.docker.set_scenario("slow_compile.log", speed=75)
    container_id = start(node)
    readiness = Readiness(node, container_id, None, heartbeat=0.25)
    assert readiness.wait() == 0, readiness.stdout + readiness.stderr.decode()
    lines = readiness.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "compiling (the long part: XLA)" in line)
    last = next(i for i, line in enumerate(lines) if "server starting" in line)
    beats = [line for line in lines[first + 1 : last] if "still waiting" in line]
    assert len(beats) >= 4, readiness.stdout
    silent = "Precompile backbone --> {'num_tokens': 16}"
    for index, beat in enumerate(beats):
        assert re.match(
            r"^\[\s*\d+s\] still waiting, phase: compiling \(the long part: XLA\);", beat
        )
        # The silence's last line, except that the last beat may land just after the compile
        # ended and before the server line (22 ms here; longer on loaded cores).
        seen = [silent] + (["Compilation of backbone"] if index == len(beats) - 1 else [])
        assert "last log line: " in beat and any(text in beat for text in seen), beat
    assert "ready: Application startup complete." in readiness.stdout


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("crash_kv_dtype.log", "exit code 1"),
        ("crash_hbm_oom.log", "exit code 1"),
        ("silent_exit.log", "exit code"),
    ],
)
def test_a_crash_at_boot_fails_within_seconds_with_the_log_tail(
    node: SshHost, fixture: str, expected: str
) -> None:
    code, after_exit, readiness, container_id = run_crash(node, fixture)
    assert code != 0
    assert after_exit < 5.0
    assert expected in readiness.stdout
    tail = readiness.stderr.decode()
    assert "last" in tail and "log lines" in tail
    last_log_line = container_log(node, container_id)[-1]["log"].strip()
    assert last_log_line in tail


def test_a_container_that_restarts_fails_the_check(node: SshHost) -> None:
    node.docker.set_scenario("hang.log", speed=50)
    container_id = start(node)
    readiness = Readiness(node, container_id, None)
    time.sleep(1.5)
    node.docker.restart(container_id)
    restarted = time.monotonic()
    assert readiness.wait(timeout=60) != 0
    assert time.monotonic() - restarted < 5.0
    # Seen mid-restart the container is "restarting" or, for an instant, "exited": either way the
    # check stops at once instead of following the new boot.
    assert "restarted" in readiness.stdout or "the container exited" in readiness.stdout


def test_timeout_fails_with_the_last_lines(node: SshHost) -> None:
    changes = {"tpu-vllm:vllm.readinessTimeout": "3s"}
    node.docker.set_scenario("hang.log", speed=50)
    container_id = start(node, changes)
    readiness = Readiness(node, container_id, changes)
    assert readiness.wait(timeout=60) != 0
    assert "not ready after 3 s" in readiness.stdout
    assert "log lines" in readiness.stderr.decode()


def test_a_server_that_does_not_list_the_model_fails_the_check(node: SshHost) -> None:
    # `Application startup complete.` alone proves nothing a client needs: here vLLM serves the
    # model under another name (a `--served-model-name` in extraArgs), so every request naming
    # google/gemma-4-E2B-it would get a 404. Only the /v1/models check can see that.
    changes = {"tpu-vllm:vllm.extraArgs": ["--served-model-name", "gemma"]}
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    container_id = start(node, changes)
    readiness = Readiness(node, container_id, changes)
    assert readiness.wait() != 0, readiness.stdout
    assert "ready: Application startup complete." in readiness.stdout
    assert "/health: 200" in readiness.stdout
    assert "does not list google/gemma-4-E2B-it" in readiness.stdout
    assert "['gemma']" in readiness.stdout  # what the server did list
    assert "TPU_VLLM_READY" not in readiness.stdout
    assert "log lines" in readiness.stderr.decode()


def test_a_refused_v1_models_request_fails_the_check_and_blames_the_key(
    node: SshHost, fake_secret_manager: FakeSecretManager
) -> None:
    """The server reads its API key once, at start (vLLM's AuthenticationMiddleware then answers
    401 to any other key). A key rotated after the start (the node fetches a new version while
    the old container runs) makes /v1/models answer 401. That must fail readiness, naming the
    key, never be skipped: clients holding the stack's api_key would be refused the same way."""
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    container_id = start(node)  # the fake vLLM took key-1 from the mounted file
    rotated = fake_secret_manager.add_version(TEST_PROJECT, "tpu-vllm-v5e1-api-key", b"key-2")
    fetched = node.run(commands("v5e1", api_key_version=rotated)[FETCH])
    assert fetched.returncode == 0, fetched.stderr.decode()
    readiness = Readiness(node, container_id, None)
    assert readiness.wait() != 0, readiness.stdout
    assert "/health: 200" in readiness.stdout
    assert "FAILED: /v1/models answered HTTP 401: the API key is the likely cause" in (
        readiness.stdout
    )
    assert "wrong or rotated key" in readiness.stdout
    assert f"sudo docker restart {container_id[:12]}" in readiness.stdout
    assert "key-1" not in readiness.stdout + readiness.stderr.decode()  # no key in the log
    assert "key-2" not in readiness.stdout + readiness.stderr.decode()
    assert "TPU_VLLM_READY" not in readiness.stdout
    assert "log lines" in readiness.stderr.decode()


def test_a_health_check_that_never_answers_200_fails_the_check(node: SshHost) -> None:
    # The engine died right after startup: uvicorn logged `Application startup complete.` and
    # keeps listening, but /health answers 503 (vLLM's answer for a dead engine). The check
    # retries /health for 30 s, then fails rather than publishing a dead endpoint.
    node.docker.set_scenario("v5e1_ready.log", speed=400, health_status=503)
    container_id = start(node)
    readiness = Readiness(node, container_id, None)
    assert readiness.wait(timeout=90) != 0, readiness.stdout
    assert "ready: Application startup complete." in readiness.stdout
    assert "/health did not answer 200" in readiness.stdout
    # The 30 s of /health retries are not silent: a heartbeat with the phase and last log line.
    assert re.search(
        r"still waiting, phase: startup complete, /health not 200 yet; last log line: .*"
        r"Application startup complete\.",
        readiness.stdout,
    ), readiness.stdout
    assert "/health: 200" not in readiness.stdout
    assert "/v1/models" not in readiness.stdout
    assert "TPU_VLLM_READY" not in readiness.stdout


def test_restart_with_changed_flags_replaces_the_container_and_follows_the_new_one(
    node: SshHost,
) -> None:
    node.docker.set_scenarios(
        [{"log": "v5e1_ready.log", "speed": 400}, {"log": "v5e1_ready_cached.log", "speed": 400}]
    )
    first = start(node)
    assert Readiness(node, first, None).wait() == 0
    changes = {"tpu-vllm:vllm.maxModelLen": 16384}
    second = start(node, changes)
    assert second != first
    assert node.docker.inspect(first) is None  # the old container was removed
    readiness = Readiness(node, second, changes)
    assert readiness.wait() == 0, readiness.stderr.decode()
    assert f"following container {second[:12]}" in readiness.stdout
    runs = [c["argv"] for c in node.docker.invocations() if "run" in c["argv"][:2]]
    assert len(runs) == 2
    assert runs[1][runs[1].index("--max-model-len") + 1] == "16384"
    assert runs[0][runs[0].index("--max-model-len") + 1] == "32768"


def test_rendered_v5e1_docker_run_carries_the_cache_mount_and_seed_flags(node: SshHost) -> None:
    text = commands("v5e1")[START]
    assert "\n  -v ~/.cache/vllm:/root/.cache/vllm \\\n" in text
    node.docker.set_scenario("v5e1_ready.log", speed=400)
    start(node)
    [run] = [c["argv"] for c in node.docker.invocations() if "run" in c["argv"][:2]]
    home = str(node.home)
    assert f"{home}/.cache/vllm:/root/.cache/vllm" in run  # `~` expanded by the VM's shell
    for option in ("--privileged", "--net=host", "/dev/shm:/dev/shm", "HF_HOME=/dev/shm"):
        assert option in run
    assert run[run.index("--shm-size") + 1] == "10gb"
    serve = run.index("serve")
    assert run[serve - 1 : serve + 2] == ["vllm", "serve", "google/gemma-4-E2B-it"]
    # Seed 000's flags exactly, then the free port this test serves on instead of 8000.
    assert run[serve + 2 :] == [*seed_000_serve_flags(), "--port", str(node.vllm_port)]
    assert Path(home, ".cache/vllm").is_dir()


def test_one_flag_per_line_so_a_diff_shows_the_flag() -> None:
    before = commands("v5e1")[START].splitlines()
    after = commands("v5e1", {"tpu-vllm:vllm.maxNumBatchedTokens": 8192})[START].splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    # The flag, and the compile cache's prefix: the flag changes compiled shapes.
    assert changed[1:] == [
        ("  --max-num-batched-tokens 4096 \\", "  --max-num-batched-tokens 8192 \\")
    ]
    assert [line.split("/xla-cache/")[0] for line in changed[0]] == [
        "cache_prefix=gs://tpu-vllm-v5e1-xla-75c84d20"
    ] * 2


def test_changing_a_flag_changes_only_the_server_commands() -> None:
    before = run_program("v5e1")
    after = run_program("v5e1", {"tpu-vllm:vllm.maxModelLen": 16384})
    old = {r.name: r.inputs for r in before.resources}
    new = {r.name: r.inputs for r in after.resources}
    assert old.keys() == new.keys()
    changed = sorted(name for name in old if old[name] != new[name])
    assert changed == ["vllm-start"]
    # Another image is a new pin, and a new node that starts it beside the old one
    # (create-first, components/vm/queued_resource.py): the pin, the TPU's `image`, the start.
    image = run_program("v5e1", {"tpu-vllm:vllm.image": "vllm/vllm-tpu:2026-11-01"})
    changed = sorted(r.name for r in image.resources if r.inputs != old[r.name])
    assert changed == ["tpu-qr", "vllm-image", "vllm-start"]
    pinned = image.outputs["image"]
    assert image.named("tpu-qr").inputs["image"] == pinned != before.outputs["image"]


def test_no_command_blocks_destroy() -> None:
    run = run_program("v5e1")
    for cmd in run.of_type("command:remote:Command"):
        assert not cmd.inputs.get("delete"), cmd.name


def test_readiness_runs_after_every_start() -> None:
    run = run_program("v5e1")
    ready = next(r for r in run.of_type("command:remote:Command") if r.name == READY)
    assert "--container c0ffee" in ready.inputs["create"]  # names the started container


def test_parse_ready_without_a_result_line() -> None:
    assert parse_ready("[ 3s] image present\n") == {
        "startup_seconds": None,
        "first_answer_seconds": None,
        "hbm": None,
        "cache": {"restored": False, "files": 0, "bytes": 0, "seconds": 0.0, "generation": "",
                  "reason": ""},
    }  # fmt: skip


def test_readiness_follows_the_printed_container_id_or_else_the_name() -> None:
    from components.vm.node_scripts import container_ref

    pulled = "Unable to find image locally\nnightly: Pulling from vllm/vllm-tpu\n" + "ab12" * 16
    assert container_ref(pulled + "\n", "tpu-vllm") == "ab12" * 16
    assert container_ref("", "tpu-vllm") == "tpu-vllm"
    assert container_ref(None, "tpu-vllm") == "tpu-vllm"
    run = run_program("v5e1", outputs_for=None)  # mocks that know no stdout
    ready = next(r for r in run.of_type("command:remote:Command") if r.name == READY)
    assert "--container tpu-vllm" in ready.inputs["create"]
