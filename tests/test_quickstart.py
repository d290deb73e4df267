"""The README's two commands for a fresh machine: `scripts/quickstart.sh` and `scripts/test.sh`.

The quickstart runs here without the Pulumi CLI (the offline plan and how to install the CLI),
and with a fake `pulumi` on PATH that records its argv, to check the login, stack and deploy
commands it would give the real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.renewal import renew_command
from tests.docs import doc_pages, read_doc
from tests.pulumi_program import ROOT

QUICKSTART = ROOT / "scripts" / "quickstart.sh"

# The fake CLI. Real behaviour it copies (Pulumi CLI docs, `pulumi whoami` and `pulumi config
# get`): `whoami` exits non-zero when no backend is logged in to, and `config get KEY` exits
# non-zero when the key is not set. Everything else succeeds and prints nothing.
FAKE_PULUMI = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$FAKE_PULUMI_LOG"
case "$1 ${2:-}" in
  "whoami "*) exit "${FAKE_WHOAMI_RC:-1}" ;;
  "config get") exit "${FAKE_CONFIG_GET_RC:-1}" ;;
esac
exit 0
"""


def _path_without_pulumi() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "pulumi").exists())


def _run(
    tmp_path: Path, *args: str, fake: bool, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "pulumi-argv.log"
    path = _path_without_pulumi()
    if fake:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "pulumi").write_text(FAKE_PULUMI)
        (bin_dir / "pulumi").chmod(0o755)
        path = f"{bin_dir}{os.pathsep}{path}"
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "GOOGLE_CLOUD_PROJECT"))
    }
    full_env = {
        **clean,
        "PATH": path,
        # The interpreter running the tests has every dependency: no venv is created.
        "VENV": sys.prefix,
        "FAKE_PULUMI_LOG": str(log),
        "TPU_VLLM_STATE_DIR": str(tmp_path / "state"),
        # An empty engine cache: no CLI built by scripts/engine/build.sh unless a test makes one.
        "TPU_VLLM_ENGINE_CACHE": str(tmp_path / "engine-cache"),
        **env,
    }
    result = subprocess.run(
        ["bash", str(QUICKSTART), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    argv = log.read_text().splitlines() if log.exists() else []
    return result, argv


def test_without_the_cli_it_prints_the_full_plan_and_how_to_install_the_cli(
    tmp_path: Path,
) -> None:
    result, _ = _run(tmp_path, "v6e4", fake=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # The full plan of the stack: its resources and the rendered server flags.
    for resource in ("tpu-qr", "tpu-ssh", "secrets-fetch", "vllm-start", "vllm-ready"):
        assert resource in out, resource
    assert "--tensor-parallel-size" in out and "google/gemma-4-31B-it" in out
    # And what to do next, for the real run.
    assert "the Pulumi CLI is not installed" in out
    assert "https://get.pulumi.com" in out and "https://www.pulumi.com/docs/install/" in out
    assert not (tmp_path / "state").exists()


def test_fresh_machine_logs_in_to_a_local_backend_then_runs_up(tmp_path: Path) -> None:
    result, argv = _run(tmp_path, "v5e1", fake=True, GOOGLE_CLOUD_PROJECT="my-project")
    assert result.returncode == 0, result.stderr
    state = tmp_path / "state"
    assert argv == [
        "whoami",
        f"login file://{state}",
        "stack select --create v5e1",
        "config get gcp:project -s v5e1",
        "config set gcp:project my-project -s v5e1",
        "up -s v5e1",
    ]
    assert state.is_dir()
    assert "PULUMI_CONFIG_PASSPHRASE" in result.stdout  # the passphrase is named up front


def test_an_existing_backend_and_project_are_kept_and_preview_only_previews(
    tmp_path: Path,
) -> None:
    result, argv = _run(
        tmp_path,
        "v6e4",
        "--preview",
        fake=True,
        FAKE_WHOAMI_RC="0",
        FAKE_CONFIG_GET_RC="0",
        PULUMI_CONFIG_PASSPHRASE="not-shown",
    )
    assert result.returncode == 0, result.stderr
    assert argv == [
        "whoami",
        "stack select --create v6e4",
        "config get gcp:project -s v6e4",
        "preview -s v6e4",
    ]
    assert "not-shown" not in result.stdout + result.stderr
    assert "PULUMI_CONFIG_PASSPHRASE" not in result.stdout


def test_backend_url_in_the_environment_means_no_login(tmp_path: Path) -> None:
    _, argv = _run(
        tmp_path,
        "v5e1",
        fake=True,
        PULUMI_BACKEND_URL="gs://bucket",
        FAKE_CONFIG_GET_RC="0",
    )
    assert argv == ["stack select --create v5e1", "config get gcp:project -s v5e1", "up -s v5e1"]


def test_a_stack_without_project_stops_before_any_preview_and_says_how(tmp_path: Path) -> None:
    result, argv = _run(tmp_path, "v5e1", fake=True, FAKE_WHOAMI_RC="0")
    assert result.returncode == 2
    assert "pulumi config set gcp:project YOUR_PROJECT -s v5e1" in result.stderr
    assert "Pulumi.v5e1.yaml" in result.stderr
    assert not [a for a in argv if a.startswith(("up", "preview"))]


@pytest.mark.parametrize(
    ("args", "named"),
    [(["v9x9"], "Stacks: v5e1 v6e4"), (["v5e1", "--yes"], "unknown option --yes")],
)
def test_a_wrong_stack_or_option_is_refused_before_any_pulumi_command(
    tmp_path: Path, args: list[str], named: str
) -> None:
    result, argv = _run(tmp_path, *args, fake=True)
    assert result.returncode == 2
    assert argv == []
    assert named in result.stderr


def test_readme_opens_with_the_two_commands() -> None:
    text = read_doc("README")
    opening = text[: text.index("\n## ")]
    assert "scripts/quickstart.sh v5e1" in opening
    assert "scripts/test.sh" in opening


def test_readme_tests_section_and_ci_use_the_same_test_command() -> None:
    text = read_doc("README")
    tests = text[text.index("## Tests") :]
    assert "scripts/test.sh" in tests[: tests.index("```\n", tests.index("```") + 3)]
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'VENV="$VENV" scripts/test.sh' in ci
    assert "pytest" not in ci.replace("scripts/test.sh", "")  # no second way to run the tests
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-r requirements.txt" in dev
    assert any(line.startswith("pytest==") for line in dev)


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)
def test_docs_run_python_one_way_only(page: Path) -> None:
    """One interpreter convention (the Quickstart's `.venv/bin/python`, no activation), in the
    README and every docs/ page: a bare `python scripts/...` on a fresh machine runs without the
    program's packages. The same holds for `renew_command`, which `pulumi up` prints for the
    reader to copy."""
    text = page.read_text()
    bare = re.findall(r"(?<![\w./-])python3? (?:-m (?!venv )|scripts/)\S+", text)
    assert not bare, bare
    assert "activate" not in text
    assert renew_command("v5e1").startswith(".venv/bin/python scripts/renew.py ")


def test_gke_stack_offline_plan_and_the_plugin_it_will_need(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, "v6e4-gke", fake=False)
    assert result.returncode == 0, result.stderr
    for resource in ("vllm-compute-class", "vllm-deployment", "vllm-service", "vllm-ready"):
        assert resource in result.stdout, resource
    assert "gcloud components install gke-gcloud-auth-plugin" in result.stdout
    # A VM stack's hint does not mention it.
    vm, _ = _run(tmp_path, "v5e1", fake=False)
    assert "gke-gcloud-auth-plugin" not in vm.stdout


def _path_without(program: str, tmp_path: Path) -> str:
    """PATH with `program` hidden: a directory holding it is replaced by links to the rest."""
    dirs: list[str] = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not (Path(d) / program).exists():
            dirs.append(d)
            continue
        copy = tmp_path / f"path-{len(dirs)}"
        copy.mkdir()
        for entry in Path(d).iterdir():
            if entry.name != program:
                (copy / entry.name).symlink_to(entry)
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


def test_gke_stack_without_the_auth_plugin_stops_before_any_pulumi_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", _path_without("gke-gcloud-auth-plugin", tmp_path))
    result, argv = _run(tmp_path, "v6e4-gke", fake=True, GOOGLE_CLOUD_PROJECT="my-project")
    assert result.returncode == 2
    assert argv == []
    assert "gcloud components install gke-gcloud-auth-plugin" in result.stderr


def test_gke_stack_with_the_auth_plugin_runs_up(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gke-gcloud-auth-plugin").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gke-gcloud-auth-plugin").chmod(0o755)
    result, argv = _run(tmp_path, "v6e4-gke", fake=True, FAKE_WHOAMI_RC="0", FAKE_CONFIG_GET_RC="0")
    assert result.returncode == 0, result.stderr
    assert argv[-1] == "up -s v6e4-gke"


def _built_cli(tmp_path: Path, *, language_host: bool) -> Path:
    """A finished scripts/engine/build.sh cache entry (its layout: bin/ and tools.tsv) holding
    the fake CLI, and the Python language host or not (the Go module proxy refuses it today)."""
    where = subprocess.run(
        ["bash", str(ROOT / "scripts" / "engine" / "build.sh"), "--where"],
        env={**os.environ, "TPU_VLLM_ENGINE_CACHE": str(tmp_path / "engine-cache")},
        capture_output=True,
        text=True,
        check=True,
    )
    bin_dir = Path(where.stdout.strip()) / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir.parent / "tools.tsv").write_text("pulumi\tv3.274.0\tbuilt\n")
    tools = ["pulumi", *(["pulumi-language-python"] if language_host else [])]
    for tool in tools:
        (bin_dir / tool).write_text(FAKE_PULUMI if tool == "pulumi" else "#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def test_the_cli_on_path_is_preferred_to_the_built_one_and_named(tmp_path: Path) -> None:
    built = _built_cli(tmp_path, language_host=True)
    result, argv = _run(tmp_path, "v5e1", fake=True, FAKE_WHOAMI_RC="0", FAKE_CONFIG_GET_RC="0")
    assert result.returncode == 0, result.stderr
    assert f"using the Pulumi CLI on PATH: {tmp_path / 'bin' / 'pulumi'}" in result.stdout
    assert str(built) not in result.stdout
    assert argv[-1] == "up -s v5e1"


def test_without_a_cli_on_path_the_built_one_runs_up_and_is_named(tmp_path: Path) -> None:
    built = _built_cli(tmp_path, language_host=True)
    result, argv = _run(tmp_path, "v5e1", fake=False, FAKE_WHOAMI_RC="0", FAKE_CONFIG_GET_RC="0")
    assert result.returncode == 0, result.stderr
    assert f"using the Pulumi CLI built by scripts/engine/build.sh: {built / 'pulumi'}" in (
        result.stdout
    )
    assert argv == [
        "whoami",
        "stack select --create v5e1",
        "config get gcp:project -s v5e1",
        "up -s v5e1",
    ]


def test_a_built_cli_without_the_language_host_is_not_used_and_says_why(tmp_path: Path) -> None:
    built = _built_cli(tmp_path, language_host=False)
    result, argv = _run(tmp_path, "v5e1", fake=False)
    assert result.returncode == 0, result.stderr
    assert argv == []  # never run: `pulumi up` would fail on the missing language host
    assert "the Pulumi CLI is not installed" in result.stdout  # so the offline plan
    assert "tpu-qr" in result.stdout
    assert f"({built / 'pulumi'}) has no Python" in result.stdout
    assert "scripts/engine/build.sh --status" in result.stdout
