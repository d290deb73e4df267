"""The renew workflow: scheduled, never for pull requests, least privilege, keyless auth."""

from __future__ import annotations

import re
from typing import Any

import yaml

from components.renewal import SCHEDULE_MINUTES
from tests.pulumi_program import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "renew.yml"
MINIMAL = {"contents": "read", "id-token": "write"}


def load() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return dict(data)


def job() -> dict[str, Any]:
    return dict(load()["jobs"]["renew"])


def test_runs_on_a_schedule_and_by_hand_never_for_pull_requests() -> None:
    triggers = load()["on"]
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    assert "pull_request" not in triggers and "pull_request_target" not in triggers
    [schedule] = triggers["schedule"]
    assert schedule["cron"] == f"*/{SCHEDULE_MINUTES} * * * *"  # the period the README quotes
    assert SCHEDULE_MINUTES == 15


def test_permissions_are_minimal() -> None:
    workflow = load()
    assert workflow["permissions"] == MINIMAL
    for name, each in workflow["jobs"].items():
        assert each["permissions"] == MINIMAL, name


def test_authenticates_by_workload_identity_federation_without_keys() -> None:
    steps = job()["steps"]
    [auth] = [s for s in steps if s.get("uses", "").startswith("google-github-actions/auth@")]
    assert auth["with"] == {
        "workload_identity_provider": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
        "service_account": "${{ vars.GCP_DEPLOYER_SERVICE_ACCOUNT }}",
    }
    text = WORKFLOW.read_text()
    assert "credentials_json" not in text  # no service-account key anywhere
    assert set(re.findall(r"secrets\.(\w+)", text)) == {
        "PULUMI_ACCESS_TOKEN",
        "PULUMI_CONFIG_PASSPHRASE",
    }


def test_each_stack_from_the_repository_variable_runs_the_renew_script() -> None:
    renew = job()
    assert "vars.RENEW_STACKS" in renew["strategy"]["matrix"]["stack"]
    assert renew["strategy"]["fail-fast"] is False  # one stack's failure never skips another
    runs = [s["run"] for s in renew["steps"] if "run" in s]
    assert '.venv/bin/python scripts/renew.py "$STACK"' in runs
    # The stack name reaches the shell through the environment, never spliced into a script.
    assert not any("${{" in run for run in runs)
    assert renew["concurrency"] == {
        "group": "renew-${{ matrix.stack }}",
        "cancel-in-progress": False,
    }


def test_actions_are_pinned_to_a_major_version() -> None:
    for step in job()["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]


#: The role the deployer needs for each kind of resource the program creates (and a renewal's
#: `pulumi up --refresh` reads and changes). Keyed by the Pulumi type's provider module.
ROLE_FOR = {
    "gcp:storage/": "roles/storage.admin",  # the compile-cache bucket and its IAM member
    "gcp:dns/": "roles/dns.admin",
    "gcp:serviceaccount/": "roles/iam.serviceAccountAdmin",
    "gcp:compute/firewall": "roles/compute.securityAdmin",
    "gcp:secretmanager/": "roles/secretmanager.admin",
    "pulumi-python:dynamic:Resource": "roles/tpu.admin",  # the queued resource
}


def readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_readme_lists_a_role_for_everything_a_renewal_deploys() -> None:
    """The workflow's deployer account runs `pulumi up --refresh` on the whole stack: a role
    missing from the README is a renewal that fails at 3 a.m. on the first resource it cannot
    read. The resources come from the program itself (dns and the compile cache on)."""
    from tests.mock_outputs import MANAGED_ZONE
    from tests.pulumi_program import run_program

    run = run_program("v5e1", {"tpu-vllm:dns.managedZone": MANAGED_ZONE})
    types = {r.type for r in run.resources}
    needed = {role for prefix, role in ROLE_FOR.items() if any(t.startswith(prefix) for t in types)}
    assert "roles/storage.admin" in needed and "roles/dns.admin" in needed
    for heading in ("Renew", "Prerequisites"):
        section = readme_section(heading)
        missing = sorted(role for role in needed if f"`{role}`" not in section)
        assert not missing, f'README "{heading}" does not name {missing}'


def test_readme_gap_table_says_when_a_renewed_node_is_warm() -> None:
    """The compile cache is carried across nodes (issue 11): the README must not say a fresh
    node always starts cold, and must say how to tell which row of the gap table applied."""
    section = readme_section("Renew")
    assert "starts cold today" not in section
    assert "`cache_restored`" in section
