"""scripts/save_hf_token.py, run as a real subprocess against the loopback Secret Manager fake
and a loopback fake of the Hugging Face Hub (huggingface_hub pointed at it with HF_ENDPOINT).

Every run checks that the token never shows up in argv, stdout or stderr. Stack config comes
from temporary files passed with ``--stack-file``; the project's own Pulumi.<stack>.yaml files
are never touched.
"""

from __future__ import annotations

import base64
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.support.fakes.hf_hub import GATED_MODEL, FakeHfHub
from tests.support.fakes.secret_manager import (
    DEFAULT_TOKEN,
    FakeSecretManager,
    crc32c,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = "scripts.save_hf_token"
PROJECT = "test-proj"
SECRET = "hf-token"
SENTINEL = b"hf_SENTINEL_6f1d0c2a9b7e4d35"
OTHER = b"hf_SENTINEL_OTHER_0b9e8d7c6a5f"
RUN_TIMEOUT = 30
#: The Hub fake of the running test (see `hub`); every run of the script asks it.
_HUB: list[FakeHfHub] = []


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def hub() -> Iterator[FakeHfHub]:
    """The Hub fake, knowing the test tokens, whose owner was granted the gated model."""
    with FakeHfHub() as fake:
        for token in (SENTINEL, OTHER):
            fake.add_token(token, granted=(GATED_MODEL,))
        _HUB.append(fake)
        try:
            yield fake
        finally:
            _HUB.remove(fake)


def script_env(fake: FakeSecretManager, **extra: str) -> dict[str, str]:
    """A clean environment: only the fakes' endpoints and a static token, no ambient project."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/nonexistent"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "SECRET_MANAGER_API_ENDPOINT": fake.url,
        "GOOGLE_OAUTH_ACCESS_TOKEN": DEFAULT_TOKEN,
        # huggingface_hub's own endpoint setting; port 9 (discard) refuses if no fake runs.
        "HF_ENDPOINT": _HUB[-1].url if _HUB else "http://127.0.0.1:9",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    env.update(extra)
    return env


def script_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", MODULE, *args]


def run_script(
    fake: FakeSecretManager,
    token: bytes,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> Result:
    argv = script_argv(*args)
    assert not any(SENTINEL.decode() in a or OTHER.decode() in a for a in argv)
    proc = subprocess.run(
        argv,
        input=token,
        capture_output=True,
        cwd=ROOT,
        env=dict(env) if env is not None else script_env(fake),
        timeout=RUN_TIMEOUT,
        check=False,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    for secret in (SENTINEL, OTHER):
        assert secret.decode() not in out
        assert secret.decode() not in err
    assert "Traceback" not in err
    return Result(proc.returncode, out, err)


def version(number: int, project: str = PROJECT, secret: str = SECRET) -> str:
    return f"projects/{project}/secrets/{secret}/versions/{number}"


@pytest.fixture
def stack_file(tmp_path: Path) -> Path:
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(
        f"config:\n  gcp:project: {PROJECT}\n  tpu-vllm:access:\n    hfTokenSecret: {SECRET}\n"
        f"  tpu-vllm:model:\n    id: {GATED_MODEL}\n"
    )
    return path


# --------------------------------------------------------------------------------------------
# The happy paths.


def test_creates_secret_and_adds_version(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    result = run_script(fake, SENTINEL + b"\n", "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    # The fake answers with the project *number* in names, as the real API does; the script
    # still prints the name in terms of the project id the operator gave.
    assert result.stdout == version(1) + "\n"
    assert fake.payloads(PROJECT, SECRET) == [SENTINEL]  # one trailing newline stripped
    secret = fake.secret(PROJECT, SECRET)
    assert secret["labels"] == {"managed-by": "tpu-vllm", "purpose": "hf-token"}
    assert secret["replication"] == {"automatic": {}}
    [add] = fake.calls("secrets.addVersion")
    assert add.body["payload"]["dataCrc32c"] == str(crc32c(SENTINEL))
    assert base64.b64decode(add.body["payload"]["data"]) == SENTINEL
    assert all(r.headers.get("authorization") == f"Bearer {DEFAULT_TOKEN}" for r in fake.requests)


def test_same_token_twice_adds_nothing(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    first = run_script(fake, SENTINEL, "--stack-file", str(stack_file))
    second = run_script(fake, SENTINEL, "--stack-file", str(stack_file))
    assert first.code == second.code == 0, second.stderr
    assert first.stdout == second.stdout == version(1) + "\n"
    assert len(fake.calls("secrets.addVersion")) == 1
    assert fake.payloads(PROJECT, SECRET) == [SENTINEL]
    assert "already holds this token" in second.stderr


def test_different_token_adds_version_2(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    assert run_script(fake, SENTINEL, "--stack-file", str(stack_file)).code == 0
    result = run_script(fake, OTHER, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    assert result.stdout == version(2) + "\n"
    assert fake.payloads(PROJECT, SECRET) == [SENTINEL, OTHER]
    assert fake.version_states(PROJECT, SECRET) == {1: "ENABLED", 2: "ENABLED"}


def test_disable_previous_disables_older_enabled_versions(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    fake.page_size = 2  # make the script follow nextPageToken
    fake.add_version(PROJECT, SECRET, b"hf_old1", state="DISABLED")
    fake.add_version(PROJECT, SECRET, b"hf_old2")
    fake.add_version(PROJECT, SECRET, OTHER)
    result = run_script(fake, SENTINEL, "--stack-file", str(stack_file), "--disable-previous")
    assert result.code == 0, result.stderr
    assert result.stdout == version(4) + "\n"
    assert fake.version_states(PROJECT, SECRET) == {
        1: "DISABLED",
        2: "DISABLED",
        3: "DISABLED",
        4: "ENABLED",
    }
    disabled = sorted(r.path.rsplit("/", 1)[1] for r in fake.calls("versions.disable"))
    assert disabled == ["2:disable", "3:disable"]  # version 1 was already disabled
    assert len(fake.calls("versions.list")) == 2  # two pages
    assert fake.payload(PROJECT, SECRET, "latest") == SENTINEL


def test_disable_previous_with_unchanged_token(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    fake.add_version(PROJECT, SECRET, OTHER)
    fake.add_version(PROJECT, SECRET, SENTINEL)
    result = run_script(fake, SENTINEL, "--stack-file", str(stack_file), "--disable-previous")
    assert result.code == 0, result.stderr
    assert result.stdout == version(2) + "\n"
    assert fake.calls("secrets.addVersion") == []
    assert fake.version_states(PROJECT, SECRET) == {1: "DISABLED", 2: "ENABLED"}


def test_existing_secret_is_kept(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    fake = fake_secret_manager
    fake.add_secret(PROJECT, SECRET, labels={"owner": "someone-else"})
    result = run_script(fake, SENTINEL, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    assert result.stdout == version(1) + "\n"
    assert [r.status for r in fake.calls("secrets.create")] == [409]
    assert fake.secret(PROJECT, SECRET)["labels"] == {"owner": "someone-else"}
    assert fake.payloads(PROJECT, SECRET) == [SENTINEL]


def test_disabled_latest_version_gets_a_new_one(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    # `latest` is the newest version; when it is disabled the VM could not read it, so the
    # same token is added again rather than reported as current.
    fake = fake_secret_manager
    fake.add_version(PROJECT, SECRET, SENTINEL, state="DISABLED")
    result = run_script(fake, SENTINEL, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    assert result.stdout == version(2) + "\n"
    assert [r.status for r in fake.calls("versions.access")] == [400]


def test_project_and_secret_from_stack_file(
    fake_secret_manager: FakeSecretManager, tmp_path: Path
) -> None:
    fake = fake_secret_manager
    path = tmp_path / "Pulumi.other.yaml"
    path.write_text(
        "config:\n"
        "  gcp:project: stack-proj\n"
        "  tpu-vllm:tpu:\n    chip: v5e-1\n"
        "  tpu-vllm:access:\n    allowPublic: false\n    hfTokenSecret: hf-token-custom\n"
        f"  tpu-vllm:model:\n    id: {GATED_MODEL}\n"
    )
    result = run_script(fake, SENTINEL, "--stack-file", str(path))
    assert result.code == 0, result.stderr
    assert result.stdout == version(1, "stack-proj", "hf-token-custom") + "\n"
    assert fake.payloads("stack-proj", "hf-token-custom") == [SENTINEL]

    # Flags win over the stack file.
    result = run_script(
        fake, SENTINEL, "--stack-file", str(path), "--project", "flag-proj", "--secret", "tok"
    )
    assert result.code == 0, result.stderr
    assert result.stdout == version(1, "flag-proj", "tok") + "\n"
    assert fake.payloads("flag-proj", "tok") == [SENTINEL]


def test_secret_defaults_to_hf_token(
    fake_secret_manager: FakeSecretManager, tmp_path: Path
) -> None:
    path = tmp_path / "Pulumi.bare.yaml"
    path.write_text(f"config:\n  gcp:project: {PROJECT}\n")
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(path), "--no-check")
    assert result.code == 0, result.stderr
    assert result.stdout == version(1, PROJECT, "hf-token") + "\n"


def test_warns_on_non_hf_token_but_saves(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    token = b"not-an-hf-token-SENTINEL"
    hub.add_token(token, granted=(GATED_MODEL,))
    result = run_script(fake_secret_manager, token, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    assert "does not look like a Hugging Face token" in result.stderr
    assert token.decode() not in result.stderr
    assert fake_secret_manager.payloads(PROJECT, SECRET) == [token]


def test_access_denied_still_adds(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    fake = fake_secret_manager
    fake.deny("secretmanager.versions.access")
    result = run_script(fake, SENTINEL, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    assert "cannot read the latest version" in result.stderr
    assert fake.payloads(PROJECT, SECRET) == [SENTINEL]


# --------------------------------------------------------------------------------------------
# Errors: one line on stderr, exit 2, nothing on stdout.


def assert_one_line_error(result: Result) -> str:
    assert result.code == 2, result
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    # components/messages.py: an error is a sentence, and never shows Python's None.
    assert errors[0].startswith("save_hf_token: error: ")
    assert errors[0].endswith("."), errors[0]
    assert "None" not in errors[0]
    return errors[0]


def test_empty_token(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    result = run_script(fake_secret_manager, b"\n", "--stack-file", str(stack_file))
    assert "empty token" in assert_one_line_error(result)
    assert fake_secret_manager.requests == []


def test_no_project(fake_secret_manager: FakeSecretManager, tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.noproj.yaml"
    path.write_text("config:\n  tpu-vllm:access:\n    hfTokenSecret: hf-token\n")
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(path), "--stack", "tst")
    line = assert_one_line_error(result)
    assert "pulumi config set gcp:project YOUR_PROJECT -s tst" in line
    assert "--project" in line

    # No --stack-file: the default Pulumi.<stack>.yaml in the project root, here absent.
    result = run_script(fake_secret_manager, SENTINEL, "--stack", "nosuchstack")
    line = assert_one_line_error(result)
    assert "pulumi config set gcp:project YOUR_PROJECT -s nosuchstack" in line
    assert fake_secret_manager.requests == []


def test_project_from_environment_when_stack_has_none(
    fake_secret_manager: FakeSecretManager,
) -> None:
    env = script_env(fake_secret_manager, GOOGLE_CLOUD_PROJECT="env-proj")
    result = run_script(
        fake_secret_manager, SENTINEL, "--stack", "nosuchstack", "--model", GATED_MODEL, env=env
    )
    assert result.code == 0, result.stderr
    assert result.stdout == version(1, "env-proj") + "\n"


def test_permission_denied(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    fake_secret_manager.deny()
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    line = assert_one_line_error(result)
    assert "roles/secretmanager.admin" in line
    assert "secretmanager.secrets.create" in line
    assert "secretmanager.versions.add" in line
    assert PROJECT in line


def test_service_disabled(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    fake_secret_manager.service_disabled = True
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    line = assert_one_line_error(result)
    assert "gcloud services enable secretmanager.googleapis.com" in line
    assert PROJECT in line


def test_rejected_credentials(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    env = script_env(fake_secret_manager, GOOGLE_OAUTH_ACCESS_TOKEN="expired-token")
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file), env=env)
    line = assert_one_line_error(result)
    assert "gcloud auth application-default login" in line


def test_missing_explicit_stack_file(
    fake_secret_manager: FakeSecretManager, tmp_path: Path
) -> None:
    missing = tmp_path / "Pulumi.missing.yaml"
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(missing))
    assert "does not exist" in assert_one_line_error(result)


def test_help_documents_stack_file_and_has_no_token_flag(
    fake_secret_manager: FakeSecretManager,
) -> None:
    result = run_script(fake_secret_manager, b"", "--help")
    assert result.code == 0
    assert "--stack-file" in result.stdout
    assert "--disable-previous" in result.stdout
    assert "--no-check" in result.stdout
    assert "--model" in result.stdout
    assert "--token" not in result.stdout
    refused = run_script(fake_secret_manager, b"", "--token", "x")
    assert refused.code == 2
    assert "unrecognized arguments" in refused.stderr


# --------------------------------------------------------------------------------------------
# The Hugging Face check: before anything is stored, the token must be able to read the model.

LICENCE_PAGE = f"https://huggingface.co/{GATED_MODEL}"


def test_checks_the_stack_model_with_this_token_before_storing(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    assert result.code == 0, result.stderr
    # huggingface_hub's own auth check, for the stack's model.id, with the token just read.
    [check] = hub.requests
    assert check.path == f"/api/models/{GATED_MODEL}/auth-check"
    assert check.authorization == f"Bearer {SENTINEL.decode()}"
    assert f"the token can read {GATED_MODEL}" in result.stderr


def test_model_flag_overrides_the_stack_file(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    result = run_script(
        fake_secret_manager,
        SENTINEL,
        "--stack-file",
        str(stack_file),
        "--model",
        "openai-community/gpt2",
    )
    assert result.code == 0, result.stderr
    assert [r.path for r in hub.requests] == ["/api/models/openai-community/gpt2/auth-check"]


def refused(fake: FakeSecretManager, result: Result) -> str:
    """The one error line of a refused check; nothing reached Secret Manager."""
    line = assert_one_line_error(result)
    assert fake.requests == [], "the token was stored although the check failed"
    return line


def test_licence_not_accepted_names_the_licence_page(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    hub.add_token(SENTINEL, granted=())  # the token's owner never accepted Gemma's licence
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    line = refused(fake_secret_manager, result)
    assert "gated model" in line
    assert f"Accept its licence at {LICENCE_PAGE}" in line
    assert "tpu-vllm:model.id in Pulumi.test.yaml" in line


def test_rejected_token_says_so(fake_secret_manager: FakeSecretManager, stack_file: Path) -> None:
    unknown = b"hf_SENTINEL_REVOKED_5e4d3c2b1a"
    result = run_script(fake_secret_manager, unknown, "--stack-file", str(stack_file))
    line = refused(fake_secret_manager, result)
    assert "rejected the token (401: Invalid credentials in Authorization header)" in line
    assert "https://huggingface.co/settings/tokens" in line
    assert unknown.decode() not in result.stderr + result.stdout


def test_fine_grained_token_without_gated_access(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    hub.add_token(SENTINEL, granted=(GATED_MODEL,), fine_grained=True)
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    line = refused(fake_secret_manager, result)
    assert "(403: " in line
    assert "fine-grained token" in line
    assert LICENCE_PAGE in line


def test_unknown_model_is_not_found(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    result = run_script(
        fake_secret_manager, SENTINEL, "--stack-file", str(stack_file), "--model", "google/nope"
    )
    line = refused(fake_secret_manager, result)
    assert "google/nope was not found on Hugging Face" in line
    assert "(the model is --model)" in line


def test_hub_errors_suggest_no_check(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    hub.fail_next(503, n=10)
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file))
    assert result.code == 1, result
    assert "Hugging Face answered 503" in result.stderr
    assert "--no-check" in result.stderr
    assert fake_secret_manager.requests == []


def test_unreachable_hub_suggests_no_check(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    env = script_env(fake_secret_manager, HF_ENDPOINT="http://127.0.0.1:9")
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(stack_file), env=env)
    assert result.code == 1, result
    assert "cannot reach Hugging Face" in result.stderr
    assert "--no-check" in result.stderr
    assert fake_secret_manager.requests == []


def test_no_check_stores_offline_without_asking_the_hub(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    env = script_env(fake_secret_manager, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    result = run_script(
        fake_secret_manager, SENTINEL, "--stack-file", str(stack_file), "--no-check", env=env
    )
    assert result.code == 0, result.stderr
    assert result.stdout == version(1) + "\n"
    assert hub.requests == []
    assert "--no-check" in result.stderr
    assert fake_secret_manager.payloads(PROJECT, SECRET) == [SENTINEL]


def test_no_model_anywhere_asks_for_one(
    fake_secret_manager: FakeSecretManager, tmp_path: Path
) -> None:
    path = tmp_path / "Pulumi.nomodel.yaml"
    path.write_text(f"config:\n  gcp:project: {PROJECT}\n")
    result = run_script(fake_secret_manager, SENTINEL, "--stack-file", str(path))
    line = refused(fake_secret_manager, result)
    assert "no model to check the token against" in line
    assert "--model MODEL_ID" in line and "--no-check" in line


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_token_not_in_argv_or_environment_during_the_hub_check(
    fake_secret_manager: FakeSecretManager, stack_file: Path, hub: FakeHfHub
) -> None:
    gate = hub.gate()
    read_end, write_end = os.pipe()
    os.write(write_end, SENTINEL)
    os.close(write_end)
    proc = subprocess.Popen(
        script_argv("--stack-file", str(stack_file)),
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=script_env(fake_secret_manager),
    )
    os.close(read_end)
    try:
        assert gate.reached.wait(RUN_TIMEOUT), "the script never asked the Hub"
        # The token is in the script's memory and on its way to the Hub in a header now.
        for name in ("cmdline", "environ"):
            assert SENTINEL not in Path(f"/proc/{proc.pid}/{name}").read_bytes()
    finally:
        gate.release.set()
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert SENTINEL not in out + err


# --------------------------------------------------------------------------------------------
# Where the token must not appear.


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_token_not_in_argv_or_environment_while_running(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    fake = fake_secret_manager
    gate = fake.gate("secrets.addVersion")
    argv = script_argv("--stack-file", str(stack_file))
    read_end, write_end = os.pipe()
    os.write(write_end, SENTINEL)
    os.close(write_end)
    proc = subprocess.Popen(
        argv,
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=script_env(fake),
    )
    os.close(read_end)
    try:
        assert gate.reached.wait(RUN_TIMEOUT), "the script never reached addVersion"
        # The script holds the token in memory now, waiting for the API's answer.
        for name in ("cmdline", "environ"):
            assert SENTINEL not in Path(f"/proc/{proc.pid}/{name}").read_bytes()
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert children == []
    finally:
        gate.release.set()
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == version(1) + "\n"
    assert SENTINEL not in out + err


def test_prompts_with_hidden_input_on_a_tty(
    fake_secret_manager: FakeSecretManager, stack_file: Path
) -> None:
    argv = script_argv("--stack-file", str(stack_file))
    env = script_env(fake_secret_manager)
    pid, master = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal and its stdin/stdout/stderr
        try:
            os.chdir(ROOT)
            os.execve(argv[0], argv, env)  # noqa: S606 - argv list, no shell
        finally:
            os._exit(127)
    output = b""
    deadline = time.monotonic() + RUN_TIMEOUT
    sent = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            if not sent and b"input hidden" in output:
                os.write(master, SENTINEL + b"\n")
                sent = True
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(master)
    assert sent, output
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert version(1).encode() in output
    assert SENTINEL not in output  # echo was off
    assert fake_secret_manager.payloads(PROJECT, SECRET) == [SENTINEL]


# --------------------------------------------------------------------------------------------
# The fake itself, as curl on the VM and other tests will use it.


def test_fake_serves_curl_style_access(fake_secret_manager: FakeSecretManager) -> None:
    fake = fake_secret_manager
    fake.add_version(PROJECT, SECRET, b"hf_one")
    fake.add_version(PROJECT, SECRET, SENTINEL)
    url = f"{fake.url}/v1/projects/{PROJECT}/secrets/{SECRET}/versions/latest:access"
    assert requests.get(url, timeout=5).status_code == 401
    response = requests.get(url, headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"}, timeout=5)
    assert response.status_code == 200
    body = response.json()
    number = fake.project_number(PROJECT)
    assert body["name"] == f"projects/{number}/secrets/{SECRET}/versions/2"
    assert base64.b64decode(body["payload"]["data"]) == SENTINEL
    assert body["payload"]["dataCrc32c"] == str(crc32c(SENTINEL))
    listed = requests.get(
        f"{fake.url}/v1/projects/{number}/secrets/{SECRET}/versions",
        headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"},
        timeout=5,
    ).json()
    assert [v["state"] for v in listed["versions"]] == ["ENABLED", "ENABLED"]  # names, not ints


def test_fake_rejects_what_the_api_rejects(fake_secret_manager: FakeSecretManager) -> None:
    fake = fake_secret_manager
    auth = {"Authorization": f"Bearer {DEFAULT_TOKEN}"}
    base = f"{fake.url}/v1/projects/{PROJECT}/secrets"
    created = requests.post(
        f"{base}?secretId={SECRET}",
        json={"replication": {"automatic": {}}},
        headers=auth,
        timeout=5,
    )
    assert created.status_code == 200
    again = requests.post(
        f"{base}?secretId={SECRET}",
        json={"replication": {"automatic": {}}},
        headers=auth,
        timeout=5,
    )
    assert again.json()["error"]["status"] == "ALREADY_EXISTS"
    data = base64.b64encode(SENTINEL).decode()
    bad_crc = requests.post(
        f"{base}/{SECRET}:addVersion",
        json={"payload": {"data": data, "dataCrc32c": str(crc32c(SENTINEL) ^ 1)}},
        headers=auth,
        timeout=5,
    )
    assert bad_crc.status_code == 400
    assert bad_crc.json()["error"]["status"] == "INVALID_ARGUMENT"
    unknown = requests.post(
        f"{base}/{SECRET}:addVersion",
        json={"payload": {"data": data, "crc": 1}},
        headers=auth,
        timeout=5,
    )
    assert unknown.status_code == 400
    assert "Unknown name" in unknown.json()["error"]["message"]
    missing = requests.get(f"{base}/nope", headers=auth, timeout=5)
    assert missing.json()["error"] == {
        "code": 404,
        "message": f"Secret [projects/{fake.project_number(PROJECT)}/secrets/nope] not found.",
        "status": "NOT_FOUND",
    }
    assert fake.payloads(PROJECT, SECRET) == []
