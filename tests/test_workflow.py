"""The PR workflow: least privilege, forks never run with credentials, plans for everyone."""

from __future__ import annotations

from typing import Any

import yaml

from tests.pulumi_program import ROOT

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
    assert "scripts/plan.py" in text
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
