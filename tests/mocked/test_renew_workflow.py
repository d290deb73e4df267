"""The renew workflow: scheduled, never for pull requests, least privilege, keyless auth."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from components import renewal
from components.renewal import SCHEDULE_MINUTES
from tests.support.docs import read_doc, section
from tests.support.pulumi_program import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "renew.yml"
MINIMAL = {"contents": "read", "id-token": "write"}


def load() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return dict(data)


def job() -> dict[str, Any]:
    return dict(load()["jobs"]["renew"])


def cron_minutes(cron: str) -> list[int]:
    """The minutes past the hour at which a five-field cron fires every hour (POSIX syntax:
    lists, ranges and steps), for checking what the workflow's schedule really does."""
    minute, *rest = cron.split()
    assert rest == ["*", "*", "*", "*"], f"{cron!r} must fire every hour"
    found: set[int] = set()
    for part in minute.split(","):
        spec, _, step = part.partition("/")
        if spec == "*":
            low, high = 0, 59
        elif "-" in spec:
            low, high = (int(x) for x in spec.split("-"))
        else:
            low = high = int(spec)
            if step:
                high = 59
        found.update(range(low, high + 1, int(step or 1)))
    return sorted(found)


def test_runs_on_a_schedule_and_by_hand_never_for_pull_requests() -> None:
    triggers = load()["on"]
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    assert "pull_request" not in triggers and "pull_request_target" not in triggers
    [schedule] = triggers["schedule"]
    assert schedule["cron"] == renewal.schedule_cron()  # the schedule docs/renewal.md quotes
    assert SCHEDULE_MINUTES == 15


def test_schedule_never_fires_at_the_top_of_the_hour() -> None:
    """GitHub delays scheduled runs at high load, "High load times include the start of every
    hour", and may drop some (GitHub docs, "Events that trigger workflows", schedule): the
    renewal runs every period, evenly spaced also across the hour, never at minute 0."""
    [schedule] = load()["on"]["schedule"]
    minutes = cron_minutes(schedule["cron"])
    assert 0 not in minutes, schedule["cron"]
    gaps = {(b - a) % 60 for a, b in zip(minutes, minutes[1:] + minutes[:1], strict=True)}
    assert gaps == {SCHEDULE_MINUTES}, schedule["cron"]
    assert cron_minutes("*/15 * * * *") == [0, 15, 30, 45]  # the parser sees the old problem
    assert cron_minutes("7-59/15 * * * *") == minutes == [7, 22, 37, 52]


def test_schedule_helpers_refuse_a_period_that_would_fire_at_minute_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(renewal, "SCHEDULE_MINUTES", 10)
    assert renewal.schedule_cron() == "7,17,27,37,47,57 * * * *"
    monkeypatch.setattr(renewal, "SCHEDULE_OFFSET_MINUTES", 20)
    with pytest.raises(ValueError, match="SCHEDULE_OFFSET_MINUTES=20"):
        renewal.schedule_cron()
    monkeypatch.setattr(renewal, "SCHEDULE_MINUTES", 25)
    with pytest.raises(ValueError, match="must divide 60"):
        renewal.schedule_cron()


def test_permissions_are_minimal() -> None:
    """`id-token: write` only on the job that authenticates, never at the workflow level
    (zizmor: excessive-permissions), and no other write permission anywhere."""
    workflow = load()
    assert workflow["permissions"] == {"contents": "read"}
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
    assert '.venv/bin/python -m scripts.renew "$STACK"' in runs
    # The stack name reaches the shell through the environment, never spliced into a script.
    assert not any("${{" in run for run in runs)
    assert renew["concurrency"] == {
        "group": "renew-${{ matrix.stack }}",
        "cancel-in-progress": False,
    }


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


def test_docs_list_a_role_for_everything_a_renewal_deploys() -> None:
    """The workflow's deployer account runs `pulumi up --refresh` on the whole stack: a role
    missing from docs/renewal.md (or from the README's "Prerequisites", for a person) is a
    renewal that fails at 3 a.m. on the first resource it cannot read. The resources come from
    the program itself (dns and the compile cache on)."""
    from tests.support.mock_outputs import MANAGED_ZONE
    from tests.support.pulumi_program import run_program

    run = run_program("v5e1", {"tpu-vllm:dns.managedZone": MANAGED_ZONE})
    types = {r.type for r in run.resources}
    needed = {role for prefix, role in ROLE_FOR.items() if any(t.startswith(prefix) for t in types)}
    assert "roles/storage.admin" in needed and "roles/dns.admin" in needed
    places = {
        "docs/renewal.md, One-time setup": section(read_doc("renewal"), "One-time setup"),
        'README "Prerequisites"': section(read_doc("README"), "Prerequisites"),
    }
    for where, text in places.items():
        missing = sorted(role for role in needed if f"`{role}`" not in text)
        assert not missing, f"{where} does not name {missing}"


def test_docs_keep_the_schedule_enabled_in_a_public_repository() -> None:
    """GitHub disables scheduled workflows in a public repository after 60 days without
    repository activity (GitHub docs, "Disabling and enabling a workflow"): docs/renewal.md
    must say so and say how to keep renewal running."""
    page = " ".join(read_doc("renewal").split())
    assert "60 days" in page and "public repositor" in page
    assert "gh workflow enable renew.yml" in page
    assert "disabled_inactivity" in page  # how to see that it happened
    assert renewal.schedule_cron() in page  # the schedule it quotes is the workflow's


def test_docs_gap_estimate_allows_for_a_dropped_run_and_claims_no_bound() -> None:
    """GitHub may drop scheduled runs at high load and start them late, and bounds neither
    (GitHub docs, "Events that trigger workflows", `schedule`: "some queued jobs may be
    dropped"): the estimate allows for one dropped run (two periods), every row of
    docs/renewal.md's gap table adds that, and none of it is called a bound ("up to")."""
    assert renewal.detection_seconds() == 2 * SCHEDULE_MINUTES * 60
    gap = section(read_doc("renewal"), "The gap a client sees")
    assert not re.search(r"up to [\d,]+ s \+", gap)
    flat = " ".join(gap.split())
    assert "has no upper bound" in flat
    assert "GitHub bounds neither how late a scheduled run starts nor how many are dropped" in flat
    rows = re.findall(r"\| ([\d,]+) s \+ ([\d,]+) s = ([\d,]+) s", gap)
    assert len(rows) == 2, rows
    for start, detection, total in rows:
        start_s, detection_s, total_s = (int(x.replace(",", "")) for x in (start, detection, total))
        assert detection_s == renewal.detection_seconds(), rows
        assert total_s == start_s + detection_s, rows


def test_docs_say_github_bounds_neither_the_delay_nor_the_drops() -> None:
    """The schedule's section and the lead's reasoning must not present the allowance for one
    dropped run as GitHub's guarantee."""
    page = " ".join(read_doc("renewal").split())
    workflow = section(read_doc("renewal"), "The scheduled workflow: `.github/workflows/renew.yml`")
    assert "GitHub bounds neither" in " ".join(workflow.split())
    why = section(read_doc("renewal"), "Why the schedule must run more often than the lead")
    why = " ".join(why.split())
    assert "That allowance is this project's choice, not a bound" in why
    assert "absorbs that" not in page


def test_the_concurrency_group_keeps_the_running_renewal_and_the_docs_say_pending_ones_go() -> None:
    """GitHub docs, "Using concurrency": a group holds at most one running and one pending
    job; a new one cancels the pending one and takes its place; `cancel-in-progress: true`
    would also cancel the running one. The workflow keeps the running renewal (a cancelled
    `pulumi up` leaves the stack locked), and neither it nor the docs may claim that runs
    queue rather than being cancelled."""
    assert job()["concurrency"]["cancel-in-progress"] is False
    workflow = section(read_doc("renewal"), "The scheduled workflow: `.github/workflows/renew.yml`")
    flat = " ".join(workflow.split())
    assert "queues rather than cancels" not in flat
    assert "at most one running and one pending run" in flat
    assert "a newer run cancels the one already waiting" in flat
    comment = " ".join(WORKFLOW.read_text().split())
    assert "a newer one cancels the waiting one" in comment
    assert "The running one is never cancelled (cancel-in-progress: false)" in comment


def test_docs_gap_table_says_when_a_renewed_node_is_warm() -> None:
    """The compile cache is carried across nodes: docs/renewal.md must not say a
    fresh node always starts cold, and must say how to tell which row of the gap table applied."""
    gap = section(read_doc("renewal"), "The gap a client sees")
    assert "starts cold today" not in gap
    assert "`cache_restored`" in gap
