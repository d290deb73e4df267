"""The README's two commands for a fresh machine: `scripts/quickstart.sh` and `scripts/test.sh`.

The quickstart runs here without the Pulumi CLI (the offline plan in brief, the full plan in a
file it names, and the steps before the real run), and with a fake `pulumi` on PATH that records
its argv, to check the login, stack and deploy commands it would give the real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.renewal import renew_command
from tests.support.docs import doc_pages, read_doc, section
from tests.support.pulumi_program import ROOT, stack_file_config

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
    tmp_path: Path, *args: str, fake: bool, **env: str | None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the quickstart; an `env` value of None removes that variable."""
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
    settings: dict[str, str | None] = {
        **clean,
        "PATH": path,
        # The interpreter running the tests has every dependency: no venv is created.
        "VENV": sys.prefix,
        "FAKE_PULUMI_LOG": str(log),
        "TPU_VLLM_STATE_DIR": str(tmp_path / "state"),
        # The offline run's full plan: the test's own file, not the checkout's.
        "TPU_VLLM_PLAN_DIR": str(tmp_path / "plans"),
        # The engine cache scripts/engine/build.sh would use: the test's own, empty unless a test
        # lays out a built CLI there (which the quickstart must not use).
        "TPU_VLLM_ENGINE_CACHE": str(tmp_path / "engine-cache"),
        **env,
    }
    full_env = {k: v for k, v in settings.items() if v is not None}
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


#: "At most about 60 lines": the brief plan and the closing steps together.
OFFLINE_MAX_LINES = 60


@pytest.mark.parametrize("stack", ["v5e1", "v6e4", "v6e4-gke"])
def test_without_the_cli_it_prints_the_plan_in_brief_and_writes_the_full_plan_to_a_named_file(
    tmp_path: Path, stack: str
) -> None:
    result, _ = _run(tmp_path, stack, fake=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert len(out.splitlines()) <= OFFLINE_MAX_LINES, out
    # The summary, the warnings and the outputs, in that order ...
    assert out.index("summary:") < out.index("warnings:") < out.index("\noutputs (")
    assert f"  stack: {stack} (Pulumi.{stack}.yaml)" in out and "  cost: $" in out
    assert "openai_base_url" in out and "api_key [secret]" in out
    # ... but not the resources and their inputs: those are in the file the run names.
    assert "\nresources (" not in out and "(pulumi-python:dynamic:Resource)" not in out
    plan_file = tmp_path / "plans" / f"{stack}.txt"
    assert f"The full plan, every resource and its inputs: {plan_file}\n" in out
    full = plan_file.read_text()
    assert full.startswith(f"# tpu-vllm plan for stack {stack}\n")
    assert "\nresources (" in full and "\noutputs:\n" in full
    assert "(gcp:serviceaccount/account:Account)" in full  # a resource type the brief omits
    # The same summary in both.
    summary = out[out.index("summary:") : out.index("\noutputs (")]
    assert summary in full
    # What to do next, for the real run; nothing was logged in to or created.
    assert "no Pulumi CLI on PATH" in out
    assert "https://get.pulumi.com" in out and "https://www.pulumi.com/docs/install/" in out
    assert not (tmp_path / "state").exists()


def test_by_default_the_full_plan_goes_to_a_git_ignored_file_in_the_project(
    tmp_path: Path,
) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to check .gitignore with")
    result, _ = _run(tmp_path, "v5e1", fake=False, TPU_VLLM_PLAN_DIR=None)
    assert result.returncode == 0, result.stderr
    plan_file = ROOT / ".pulumi-state" / "plans" / "v5e1.txt"
    assert f"The full plan, every resource and its inputs: {plan_file}\n" in result.stdout
    assert "\nresources (" in plan_file.read_text()
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", str(plan_file.relative_to(ROOT))],
        cwd=ROOT,
        check=False,
    )
    assert ignored.returncode == 0, f"{plan_file} is not git-ignored"


#: The closing steps, in their order: the project, who may connect, the
#: Hugging Face token, Google credentials, the Pulumi CLI; then the quickstart again.
NEXT_STEPS = (
    "  1. gcp:project, one line under `config:`:\n       gcp:project: YOUR_PROJECT\n",
    "  2. who may connect, under `tpu-vllm:access:`",
    "       allowedCidrs:\n         - YOUR.CLIENTS.RANGE/24",
    "     .venv/bin/python -m scripts.save_hf_token --stack {stack}\n",
    "  4. gcloud auth application-default login\n",
    "  5. install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh\n",
    "Then run this again: scripts/quickstart.sh {stack}\n",
)
SSH_STEP = "       sshCidrs:\n         - YOUR.OWN.ADDRESS/32"


@pytest.mark.parametrize("stack", ["v5e1", "v6e4-gke"])
def test_the_closing_hint_lists_the_real_next_steps_in_order(tmp_path: Path, stack: str) -> None:
    """The project, who may connect, the token, the credentials, the CLI, in that order; the
    first two as lines of the stack file, which need no CLI."""
    result, _ = _run(tmp_path, stack, fake=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    places = [out.find(step.format(stack=stack)) for step in NEXT_STEPS]
    assert -1 not in places, [s for s, at in zip(NEXT_STEPS, places, strict=True) if at == -1]
    assert places == sorted(places)
    assert out.rstrip("\n").endswith(NEXT_STEPS[-1].format(stack=stack).rstrip("\n"))
    # A GKE stack's kubectl access is part of step 4, the credentials; it has no SSH.
    plugin = out.find("gcloud components install gke-gcloud-auth-plugin")
    ssh = out.find(SSH_STEP)
    if stack == "v6e4-gke":
        assert places[4] < plugin < places[5]
        assert ssh == -1
    else:
        assert plugin == -1
        assert places[2] < ssh < places[3]
    # Only the user's own CLI is offered: none built into a cache outside the clone.
    for gone in (".cache/tpu-vllm", "scripts/engine/build.sh", "language host"):
        assert gone not in out, gone


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
    README and every docs/ page: a bare `python -m scripts...` on a fresh machine runs without the
    program's packages. The same holds for `renew_command`, which `pulumi up` prints for the
    reader to copy."""
    text = page.read_text()
    bare = re.findall(r"(?<![\w./-])python3? (?:-m (?!venv )|scripts/)\S+", text)
    assert not bare, bare
    assert "activate" not in text
    assert renew_command("v5e1").startswith(".venv/bin/python -m scripts.renew ")


#: Where a user or a machine is told how to run an operator script.
RUN_INSTRUCTIONS = (
    *doc_pages(),
    *sorted(ROOT.glob(".github/workflows/*.yml")),
    *sorted(ROOT.glob("Pulumi.*.yaml")),
    QUICKSTART,
)


@pytest.mark.parametrize("path", RUN_INSTRUCTIONS, ids=lambda p: p.name)
def test_the_operator_scripts_are_run_as_modules(path: Path) -> None:
    """`python -m scripts.NAME` from the project root, never `python scripts/NAME.py`: the
    scripts import `components` and `scripts` as packages and edit no `sys.path`."""
    stale = re.findall(r"python3?\"? scripts/\w+\.py", path.read_text())
    assert not stale, stale


@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.py")), ids=lambda p: p.name)
def test_no_operator_script_edits_sys_path(script: Path) -> None:
    """Modules, not files to execute: no `sys.path` edit (so no `# noqa: E402` after one), and
    no shebang that would invite running one by its path."""
    text = script.read_text()
    assert "sys.path" not in text
    assert "E402" not in text
    assert not text.startswith("#!")


def test_gke_stack_offline_plan_and_the_plugin_it_will_need(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, "v6e4-gke", fake=False)
    assert result.returncode == 0, result.stderr
    full = (tmp_path / "plans" / "v6e4-gke.txt").read_text()
    for resource in ("vllm-compute-class", "vllm-deployment", "vllm-service", "vllm-ready"):
        assert f"\n{resource}  (" in full, resource
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


@pytest.mark.parametrize("stack", ["v5e1", "v6e4", "v6e4-gke"])
def test_the_quickstart_says_in_words_that_the_model_is_gated_and_who_accepts_its_licence(
    stack: str,
) -> None:
    """The Gemma models are gated. Without the licence accepted on the
    model's page by the account whose token is stored, vLLM cannot download the weights on a
    billing TPU; a link anchor alone does not tell the reader that. The Quickstart must say
    it, with the page of each stack's `model.id` written out."""
    model = str(stack_file_config(stack)["tpu-vllm:model"]["id"])
    quickstart = " ".join(section(read_doc("README"), "Quickstart").split())
    assert "The Gemma models are gated" in quickstart
    assert f"https://huggingface.co/{model} for `{stack}`" in quickstart or (
        f"https://huggingface.co/{model} for `v6e4` and `{stack}`" in quickstart
    )
    assert "logged in as the account whose token you are about to store" in quickstart
    assert "accept the licence there" in quickstart


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


@pytest.mark.parametrize("language_host", [True, False])
def test_a_cli_built_into_the_engine_cache_is_never_used_nor_named(
    tmp_path: Path, language_host: bool
) -> None:
    """The engine layer's CLI (scripts/engine/build.sh, in a cache outside the clone) is the
    tests' tool, not the user's: without a `pulumi` on PATH the quickstart does the offline part
    and offers the install, whatever that cache holds."""
    built = _built_cli(tmp_path, language_host=language_host)
    result, argv = _run(tmp_path, "v5e1", fake=False, FAKE_WHOAMI_RC="0", FAKE_CONFIG_GET_RC="0")
    assert result.returncode == 0, result.stderr
    assert argv == []  # the built fake CLI never ran
    assert "no Pulumi CLI on PATH, so this was the offline part" in result.stdout
    assert (tmp_path / "plans" / "v5e1.txt").is_file()
    assert str(built) not in result.stdout + result.stderr
    assert "scripts/engine/build.sh" not in result.stdout + result.stderr
