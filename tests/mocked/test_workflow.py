"""The PR workflow: least privilege, forks never run with credentials, plans for everyone."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.docs import read_doc, section
from tests.support.pulumi_program import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"
#: Every committed stack file is previewed and planned.
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def load() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return dict(data)


def test_runs_on_pull_requests_without_pull_request_target() -> None:
    workflow = load()
    assert "pull_request" in workflow["on"]
    assert "pull_request_target" not in workflow["on"]
    assert workflow["permissions"] == {"contents": "read"}


def test_preview_has_least_privilege_and_skips_forks() -> None:
    job = load()["jobs"]["preview"]
    assert job["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    assert job["strategy"]["matrix"]["stack"] == STACKS
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any(u.startswith("google-github-actions/auth@") for u in uses)
    preview = next(s for s in job["steps"] if s.get("with", {}).get("command") == "preview")
    assert preview["uses"].startswith("pulumi/actions@")
    assert preview["with"]["comment-on-pr"] is True
    assert preview["with"]["cloud-url"] == "${{ vars.PULUMI_BACKEND_URL }}"


def test_plan_runs_for_every_pr_with_no_credentials() -> None:
    job = load()["jobs"]["plan"]
    assert "if" not in job
    assert job["permissions"] == {"contents": "read"}
    text = yaml.safe_dump(job)
    assert "secrets." not in text
    assert "id-token" not in text
    assert "python -m scripts.plan" in text
    assert "diff -u" in text
    assert job["strategy"]["matrix"]["stack"] == STACKS


def test_preview_can_reach_a_gke_stacks_cluster() -> None:
    """The GKE backend's Kubernetes provider authenticates with gke-gcloud-auth-plugin."""
    job = load()["jobs"]["preview"]
    setup = [
        s
        for s in job["steps"]
        if s.get("uses", "").startswith("google-github-actions/setup-gcloud@")
    ]
    assert setup and "gke-gcloud-auth-plugin" in setup[0]["with"]["install_components"]
    steps = [s.get("uses", "") or s.get("name", "") for s in job["steps"]]
    assert steps.index(setup[0]["uses"]) < next(
        i for i, s in enumerate(job["steps"]) if s.get("with", {}).get("command") == "preview"
    )


# -- Both workflows: supply chain, script injection, setup ---------------------------------

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
#: `owner/repo@<40 hex> # vX.Y.Z`: a full commit SHA with the tag it was read from.
PINNED = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)\s*$")


def steps_of(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text())
    return [step for job in data["jobs"].values() for step in job["steps"]]


def test_both_workflows_are_checked() -> None:
    assert [p.name for p in WORKFLOWS] == ["preview.yml", "renew.yml"]


def test_every_action_is_pinned_to_a_commit_with_its_version() -> None:
    """A tag can be moved to other code; these jobs hold `id-token: write` and deploy to GCP.
    Each `uses:` names a full commit SHA and, in a comment, the version it was read from; one
    action is pinned to one commit in every workflow."""
    pins: dict[str, set[tuple[str, str]]] = {}
    for path in WORKFLOWS:
        lines = [line for line in path.read_text().splitlines() if "uses:" in line]
        assert len(lines) == sum("uses" in step for step in steps_of(path)), path.name
        for line in lines:
            match = PINNED.search(line)
            assert match, f"{path.name}: {line.strip()} is not pinned to a commit SHA"
            pins.setdefault(match[1], set()).add((match[2], match[3]))
    assert {"actions/checkout", "google-github-actions/auth", "pulumi/actions"} <= set(pins)
    for action, versions in pins.items():
        assert len(versions) == 1, f"{action} is pinned to different commits: {versions}"


def test_run_scripts_take_expressions_only_through_env() -> None:
    """A `${{ }}` inside a `run:` script is pasted into the script text before the shell sees
    it (script injection); through `env:` it is a variable's value."""
    for path in WORKFLOWS:
        for step in steps_of(path):
            if "run" in step:
                assert "${{" not in step["run"], f"{path.name}: {step.get('name')}"


def test_checkouts_keep_no_credentials() -> None:
    for path in WORKFLOWS:
        for step in steps_of(path):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, path.name


#: What `.ci/run` passes: no GitHub API calls, and fail on any medium or high finding.
ZIZMOR_ARGS = ["--offline", "--no-progress", "--min-severity", "medium"]


def zizmor() -> str | None:
    """The zizmor executable of the running virtualenv (`.ci/run` installs it), else PATH's."""
    beside = Path(sys.executable).parent / "zizmor"
    return str(beside) if beside.exists() else shutil.which("zizmor")


def test_zizmor_finds_nothing_medium_or_high() -> None:
    """The check `.ci/run` makes, run here too when zizmor is installed."""
    executable = zizmor()
    if executable is None:
        pytest.skip("zizmor is not installed (`.ci/run` installs it)")
    result = subprocess.run(
        [executable, *ZIZMOR_ARGS, ".github/workflows"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_a_pinned_zizmor_offline_on_the_workflows() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s+zizmor==\d+\.\d+\.\d+$", ci, re.MULTILINE), "zizmor is not pinned"
    assert f"zizmor {' '.join(ZIZMOR_ARGS)} .github/workflows" in ci


@pytest.mark.parametrize(
    ("workflow", "page"),
    [("preview", "preview"), ("renew", "renewal")],
)
def test_docs_setup_enables_the_iam_credentials_api(workflow: str, page: str) -> None:
    """Workload Identity Federation through a service account calls the IAM Service Account
    Credentials API: without `token_format` the auth step only calls STS and writes a credentials
    file whose `service_account_impersonation_url` is `generateAccessToken` (google-github-actions/
    auth v2.1.13 `src/main.ts`, `src/client/workload_identity_federation.ts`), so the run's first
    Google API call needs the API: each workflow's setup (docs/preview.md, docs/renewal.md,
    "One-time setup") must enable it."""
    setup = section(read_doc(page), "One-time setup")
    blocks = re.findall(r"```bash\n(.*?)```", setup, re.DOTALL)
    commands = [" ".join(b.replace("\\\n", " ").split()) for b in blocks]
    enables = [
        line
        for block in commands
        for line in block.split("gcloud ")
        if line.startswith("services enable ")
    ]
    assert any("iamcredentials.googleapis.com" in line.split() for line in enables), workflow
    assert "workloadIdentityUser" in setup, workflow  # the same section binds the account
