"""The costs and waits tables (the README's first screen, docs/operations.md) are what the
program's own figures give, per stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from components import catalog
from components.gke import crd_wait
from scripts import budget
from tests.support.pulumi_program import ROOT


def test_operations_tables_match_the_stack_files_catalog_and_timeouts() -> None:
    expected = budget.render_table(budget.all_stacks())
    found = budget.generated((ROOT / "docs" / "operations.md").read_text())
    assert found == expected, "run `.venv/bin/python -m scripts.budget --update-readme`"


def test_readme_first_screen_names_the_cost_per_hour_run_and_day() -> None:
    """Before any scrolling (the first 40 lines), the hourly, per-run and per-day
    cost of every stack, as the program's own figures give them."""
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert budget.summary_table(budget.all_stacks()) in first, (
        "run `.venv/bin/python -m scripts.budget --update-readme`"
    )
    for column in ("per hour", "one run, at most", "a day kept alive, at most"):
        assert column in first
    assert "pulumi up`, worst case" in first
    # The lead the prose names is the stack's own.
    assert f"`renewal.lead` ({budget.duration(budget.budget('v5e1').lead_s)} for `v5e1`)" in (
        first.replace("\n", " ")
    )


def test_a_day_kept_alive_costs_the_runs_that_fit_in_it() -> None:
    """v5e1: a new 4 h run at most every 4 h - 1 h 20 min = 2 h 40 min, each billed up to
    4 h: 9 runs a day of $2.408, against $14.45 for 24 h without overlap."""
    b = budget.budget("v5e1")
    assert b.day_usd == pytest.approx(9 * 0.602 * 4)
    assert budget.day_usd(0.602, None, 0) == pytest.approx(24 * 0.602)
    # v6e4: runs every 4 h - 1 h 25 min = 2 h 35 min; 9 of them and 45 min more, whose worst
    # placement is all overlap: 9 x 4 h + 45 min + 45 min = 37.5 h (an average, 24 x 4 / 2.58,
    # would say 37.2 h and undercount).
    assert budget.budget("v6e4").day_usd == pytest.approx(37.5 * 5.40)


def test_v5e1_worst_case_adds_up_from_its_parts() -> None:
    b = budget.budget("v5e1")
    # One zone: 30 min capacity wait + 20 min provisioning; then a 10 min host-key wait, the
    # dial retries with every dial timing out (components/ssh_dial.py: 611.3 s of backoff plus
    # 131 x 10 s), a 10 min secret fetch, the 30 min readiness timeout and the model's two
    # answers (a chat and, with the gemma4 tool-call parser, a tool call) at 2 min each.
    assert (b.zones, b.capacity_wait_s, b.provisioning_s) == (1, 1800, 1200)
    assert (b.dial_limit, b.dial_timeout_s) == (130, 10)
    assert b.ssh_s == pytest.approx(611.3 + 131 * 10, abs=0.1)
    assert (b.host_key_s, b.secrets_s, b.readiness_s, b.answers_s) == (600, 600, 1800, 240)
    assert b.worst_case_s == pytest.approx(1800 + 1200 + 600 + b.ssh_s + 600 + 1800 + 240)
    assert budget.duration(b.worst_case_s) == "2 h 16 min 1 s"


def test_v6e4_worst_case_counts_every_zone_and_the_deletes_between() -> None:
    b = budget.budget("v6e4")
    assert b.zones == 3 and b.zone_delete_s == 1800 and b.readiness_s == 3600
    expected = 3 * (1800 + 1200) + 2 * 1800 + 600 + b.ssh_s + 600 + 3600 + 240
    assert b.worst_case_s == pytest.approx(expected)


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_prices_come_from_the_catalog(stack: str) -> None:
    b = budget.budget(stack)
    chip = catalog.CHIPS["v5e-1" if stack == "v5e1" else "v6e-4"]
    assert b.hourly_usd == pytest.approx(chip.hourly_usd("flex-start"))
    assert b.max_run_usd == pytest.approx(round(b.hourly_usd * 4, 2))


def test_figures_follow_the_config() -> None:
    b = budget.budget(
        "v5e1",
        {"tpu-vllm:tpu.capacityWait": "10m", "tpu-vllm:vllm.readinessTimeout": "45m"},
    )
    assert (b.capacity_wait_s, b.readiness_s) == (600, 2700)
    # Without a tool-call parser the server cannot be asked a tool call: one answer only.
    plain = budget.budget("v5e1", {"tpu-vllm:vllm.toolCallParser": None})
    assert plain.answers_s == 120


def test_spot_has_no_bound_on_cost() -> None:
    b = budget.budget(
        "v5e1", {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    )
    assert b.max_run_usd is None and b.max_run_hours is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (40, "40 s"), (1800, "30 min"), (3600, "1 h"), (6800, "1 h 53 min 20 s")],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert budget.duration(seconds) == text


def test_gke_stack_has_its_own_table_with_replicas_and_its_worst_case() -> None:
    """GKE: price x replicas; cluster, then its system node pool beside the wait for the CRDs
    (the longer of the two: both need only the cluster, the Deployment needs both), then the
    readiness Job's first node and each replica's start in turn (a rolling update replaces them
    one at a time), the model's two answers, plus its margin (the load balancer is not awaited:
    `pulumi.com/skipAwait`); what node recycling's overlap can cost: the replacement runs
    beside the node for at most `renewal.lead`; and an upgrade's spare node, for the rollout."""
    b = budget.gke_budget("v6e4-gke")
    one = catalog.CHIPS["v6e-4"].hourly_usd("flex-start")
    assert b.replicas == 2 and b.zones == 2
    assert b.hourly_usd == pytest.approx(2 * one)
    assert b.max_run_usd == pytest.approx(round(2 * one * 4, 2))
    assert (b.cluster_s, b.node_pool_s, b.load_balancer_awaited) == (2400, 1800, False)
    assert b.crd_wait_s == crd_wait.CRD_WAIT_TIMEOUT_SECONDS == 3600
    assert (b.capacity_wait_s, b.readiness_s, b.job_margin_s) == (1800, 3600, 300)
    assert b.answers_s == 2 * 120
    # Each replica's turn beyond its start: 40 s termination grace, 10 min pull, 5 min restore.
    assert b.turn_extra_s == 40 + 600 + 300
    turns = 2 * (940 + 3600)
    assert b.worst_case_s == pytest.approx(2400 + max(1800, 3600) + 1800 + turns + 240 + 300)
    # The spare node bills from its start, not while GKE looks for it.
    assert b.spare_usd == pytest.approx(one * turns / 3600)
    assert b.lead_s == 3600 and b.overlap_usd == pytest.approx(one)  # 1 h of one slice
    table = budget.render_table(["v5e1", "v6e4-gke"])
    assert "| `v6e4-gke` |" in table and "$10.80 (2 x $5.40)" in table
    assert "1 h per node and run, at most $5.40 each" in table
    assert "**4 h 50 min 20 s**" in table
    assert "| 2 x (15 min 40 s + 1 h) |" in table and "$13.62 (2 h 31 min 20 s)" in table
    lead = budget.gke_budget("v6e4-gke", {"tpu-vllm:renewal.lead": "30m"})
    assert lead.overlap_usd == pytest.approx(one / 2)
    spot = {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    assert budget.gke_budget("v6e4-gke", spot).lead_s == 0


def test_gke_with_an_existing_cluster_does_not_wait_for_one() -> None:
    """Nor for a node pool: the TPU pools are the ComputeClass's, made when pods ask; nor for
    the load balancer, which is not awaited. It may wait for the CRDs (an existing cluster may
    be new too), then capacity wait + readiness per replica + the answers + the Job's margin."""
    changes = {"tpu-vllm:gke.cluster": "projects/p-1234/locations/us-east5/clusters/shared"}
    b = budget.gke_budget("v6e4-gke", changes)
    assert b.cluster_s == 0
    assert b.node_pool_s == 0
    assert b.worst_case_s == pytest.approx(3600 + 1800 + 2 * (940 + 3600) + 240 + 300)


def test_a_histogram_is_billed_as_one_sample_per_label_set(tmp_path: Path) -> None:
    """Managed Service for Prometheus folds a histogram's buckets, sum and count into one
    distribution point (prometheus-engine `pkg/export/transform.go`); `_created` gauges and
    other lines are a sample each."""
    page = tmp_path / "metrics.txt"
    page.write_text(
        "# TYPE req_seconds histogram\n"
        + "".join(
            f'req_seconds_bucket{{le="{le}",model="{m}"}} 1.0\n'
            for m in ("a", "b")
            for le in ("0.1", "1.0", "+Inf")
        )
        + 'req_seconds_sum{model="a"} 1.0\nreq_seconds_count{model="a"} 1.0\n'
        + 'req_seconds_sum{model="b"} 1.0\nreq_seconds_count{model="b"} 1.0\n'
        + "# TYPE req_seconds_created gauge\n"
        + 'req_seconds_created{model="a"} 1.7e9\nreq_seconds_created{model="b"} 1.7e9\n'
        + "# TYPE up_total counter\nup_total 3.0\n"
    )
    assert budget.sample_series(page) == 2 + 2 + 1
    assert budget.sample_series() == 129  # the v6e4 sample: 459 lines, 311 of them buckets
