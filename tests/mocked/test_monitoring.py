"""Observability as the stack declares it: config, metric names, the bodies of the
dashboard, uptime check and alerts, and the resources each backend registers.

The bodies are checked against the Monitoring API's discovery documents that ship with
google-api-python-client (tests/support/discovery.py), every PromQL expression with Prometheus' own
parser (tests/support/promql.py), every metric name against a /metrics sample of the vLLM the image
runs (tests/support/fixtures/vllm_metrics/).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from components import monitoring_bodies as bodies
from components import vllm_metrics as vm
from components.config import MAX_SCRAPE_SECONDS, MIN_SCRAPE_SECONDS, ConfigError
from components.naming import resource_id
from components.vm.queued_resource_spec import SLOTS, Spec, node_ids
from scripts.program_runner import UPTIME_CHECK_IPS
from tests.support.discovery import violations
from tests.support.mock_outputs import DASHBOARD_ID, LB_ADDRESS, UPTIME_CHECK_ID, existing_cluster
from tests.support.promql import parse_errors, prometheus_2_44_names
from tests.support.pulumi_program import ROOT, ProgramRun, run_program, stack_file_config

SAMPLE = ROOT / "tests" / "support" / "fixtures" / "vllm_metrics" / "v6e4_metrics.txt"
CHANNEL = "projects/test-project/notificationChannels/1234567890"
ALERTS = {"tpu-vllm:monitoring.notificationChannels": [CHANNEL]}
UPTIME = {"tpu-vllm:monitoring.uptimeCheck": True}
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
UPTIME_CHECK = "gcp:monitoring/uptimeCheckConfig:UptimeCheckConfig"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
IAM = "gcp:projects/iAMMember:IAMMember"
FIREWALL = "gcp:compute/firewall:Firewall"
NODE_SA = "tpu-vllm-v5e1@test-project.iam.gserviceaccount.com"


def sample_names(path: Path = SAMPLE) -> set[str]:
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in path.read_text().splitlines()
        if line and not line.startswith("#")
    }


def watches() -> list[bodies.Watch]:
    return [
        bodies.Watch("v5e1", "vm", vm.queries_for("v5e1"), None, check, node_ids("v5e1"))
        for check in (None, UPTIME_CHECK_ID)
    ] + [
        bodies.Watch("v6e4-gke", "gke", vm.queries_for("v6e4-gke", "tpu-vllm-v6e4-gke"),
                     "tpu-vllm-v6e4-gke", check)
        for check in (None, UPTIME_CHECK_ID)
    ]  # fmt: skip


# -- metric names ------------------------------------------------------------------------------


def test_every_vllm_name_the_stack_queries_is_in_the_sample() -> None:
    names = sample_names()
    assert set(vm.USED) <= names
    queried = set()
    for watch in watches():
        for query in bodies.promql(bodies.dashboard(watch)) + bodies.promql(
            bodies.alert_policies(watch, [CHANNEL])
        ):
            queried |= set(re.findall(r"vllm:[a-z0-9_:]+", query))
    assert queried and queried <= names, queried - names


def test_no_name_the_current_engine_removed_is_used_anywhere() -> None:
    """vLLM 0.32 registers none of `REMOVED` (V0's gpu_cache_usage_perc, the deprecated
    time_per_output_token_seconds, ...): no body, script or doc of the stack may use one."""
    names = sample_names()
    assert not set(vm.REMOVED) & names
    texts = [
        json.dumps([bodies.dashboard(w), bodies.alert_policies(w, [CHANNEL])]) for w in watches()
    ]
    texts += [p.read_text() for p in (ROOT / "scripts").glob("*.py")]
    texts += [(ROOT / "components" / "monitoring_bodies.py").read_text()]
    for removed in vm.REMOVED:
        for text in texts:
            assert not re.search(re.escape(removed) + r"(?![a-z_])", text), removed


def test_the_removed_name_check_can_fail() -> None:
    text = "sum(vllm:gpu_cache_usage_perc)"
    assert any(re.search(re.escape(r) + r"(?![a-z_])", text) for r in vm.REMOVED)


# -- the bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("watch", watches(), ids=lambda w: f"{w.backend}-{bool(w.uptime_check_id)}")
def test_the_dashboard_is_a_valid_monitoring_v1_dashboard_with_every_tile(
    watch: bodies.Watch,
) -> None:
    body = bodies.dashboard(watch)
    assert violations(body, "monitoring.v1", "Dashboard") == []
    titles = [t["widget"]["title"] for t in body["mosaicLayout"]["tiles"]]
    for wanted in (
        "Requests running and waiting",
        "Tokens per second",
        "Time to first token",
        "Inter-token latency",
        "End-to-end request latency",
        "KV-cache usage",
        "Preemptions per second",
        "Request outcomes per second",
        "Endpoint up",
    ):
        assert wanted in titles
    assert any(t.startswith("TPU duty cycle") for t in titles)
    assert any(t.startswith("TPU HBM used") for t in titles)
    tiles = body["mosaicLayout"]["tiles"]
    assert all(t.get("xPos", 0) + t["width"] <= bodies.COLUMNS for t in tiles)
    # Zero positions are left out, as the API returns them: the first tile has neither.
    assert "xPos" not in tiles[0] and "yPos" not in tiles[0]
    assert (tiles[1]["xPos"], "yPos" in tiles[1]) == (bodies.TILE_WIDTH, False)
    assert tiles[2]["yPos"] == bodies.TILE_HEIGHT and "xPos" not in tiles[2]
    text = json.dumps(body)
    assert ("p50" in text) and ("p95" in text)
    assert (UPTIME_CHECK_ID in text) == bool(watch.uptime_check_id)


@pytest.mark.parametrize("watch", watches(), ids=lambda w: f"{w.backend}-{bool(w.uptime_check_id)}")
def test_every_promql_expression_parses_with_prometheus_own_parser(watch: bodies.Watch) -> None:
    queries = bodies.promql(bodies.dashboard(watch)) + bodies.promql(
        bodies.alert_policies(watch, [CHANNEL])
    )
    assert len(queries) >= 16
    assert parse_errors(queries) == {}


#: Managed Service for Prometheus evaluates PromQL at parity with Prometheus 2.44 (GMP docs,
#: "PromQL compatibility"), older than the parser above (3.x): every function the queries call
#: must be one of 2.44's, as that release's own parser lists them (tests/support/promql_2_44).
KEYWORDS = frozenset(
    ["by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"]
)


def called(query: str) -> set[str]:
    """Names called in a query (`name(`), string literals left out."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)
    return set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", bare)) - KEYWORDS


@pytest.mark.parametrize("watch", watches(), ids=lambda w: f"{w.backend}-{bool(w.uptime_check_id)}")
def test_every_function_the_queries_call_exists_in_the_prometheus_gmp_runs(
    watch: bodies.Watch,
) -> None:
    queries = bodies.promql(bodies.dashboard(watch)) + bodies.promql(
        bodies.alert_policies(watch, [CHANNEL])
    )
    used = set().union(*(called(q) for q in queries))
    assert {"histogram_quantile", "rate", "sum"} <= used
    assert used - prometheus_2_44_names() == set()
    # The check can fail: functions added after 2.44 are caught.
    assert called('sort_by_label(up, "job") + limitk(2, up)') - prometheus_2_44_names() == {
        "sort_by_label", "limitk"
    }  # fmt: skip


def test_the_parser_rejects_a_broken_expression() -> None:
    broken = ["sum(rate(vllm:prompt_tokens_total[5m])", "histogram_quantile(0.95, )"]
    assert set(parse_errors(broken)) == set(broken)


@pytest.mark.parametrize("watch", watches(), ids=lambda w: f"{w.backend}-{bool(w.uptime_check_id)}")
def test_alert_policies_are_valid_monitoring_v3_bodies(watch: bodies.Watch) -> None:
    policies = bodies.alert_policies(watch, [CHANNEL])
    assert set(policies) == {"endpoint-down", "kv-cache-full", "waiting-growing"}
    for body in policies.values():
        assert violations(body, "monitoring.v3", "AlertPolicy") == []
        assert body["notificationChannels"] == [CHANNEL]
        # Made before any vLLM series exists: the API must not refuse them for that.
        [condition] = body["conditions"]
        assert condition["conditionPrometheusQueryLanguage"]["disableMetricValidation"] is True
    down = policies["endpoint-down"]["conditions"][0]["conditionPrometheusQueryLanguage"]
    if watch.uptime_check_id:
        # check_passed is written for several resource types: the query names uptime_url.
        assert (
            f'{{monitored_resource="uptime_url",check_id="{watch.uptime_check_id}"}}'
            in down["query"]
        )
        tile = json.dumps(bodies.dashboard(watch))
        assert 'monitored_resource=\\"uptime_url\\",check_id=' in tile
    else:
        assert down["query"].startswith("absent_over_time(")


def test_the_uptime_check_is_a_valid_monitoring_v3_body_on_health() -> None:
    body = bodies.uptime_check("v5e1", "test-project", "203.0.113.9", 8000)
    assert violations(body, "monitoring.v3", "UptimeCheckConfig") == []
    assert body["httpCheck"]["path"] == "/health" and body["httpCheck"]["port"] == 8000
    assert body["monitoredResource"] == {
        "type": "uptime_url", "labels": {"project_id": "test-project", "host": "203.0.113.9"}
    }  # fmt: skip


def test_the_validator_rejects_what_the_api_would() -> None:
    watch = watches()[0]
    body = bodies.dashboard(watch)
    body["mosaicLayout"]["tiles"][0]["widget"]["xyChart"] = {"dataSets": [{"plotType": "LINES"}]}
    body["mosaicLayout"]["tiles"][1]["widget"]["subtitle"] = "no such field"
    found = violations(body, "monitoring.v1", "Dashboard")
    assert any("plotType" in f for f in found) and any("subtitle" in f for f in found)
    policy = bodies.alert_policies(watch, [CHANNEL])["kv-cache-full"]
    policy["combiner"] = "EITHER"
    assert violations(policy, "monitoring.v3", "AlertPolicy")


def test_pulumi_args_keep_map_keys_and_snake_case_fields() -> None:
    args = bodies.pulumi_args(bodies.uptime_check("s", "p", "h", 1))
    assert args["monitored_resource"]["labels"] == {"project_id": "p", "host": "h"}
    assert args["http_check"]["accepted_response_status_codes"] == [
        {"status_class": "STATUS_CLASS_2XX"}
    ]
    assert args["user_labels"] == {"tpu-vllm-stack": "s"}


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"tpu-vllm:monitoring.scrapeInterval": "5s"}, "monitoring.scrapeInterval"),
        ({"tpu-vllm:monitoring.scrapeInterval": "10m"}, "monitoring.scrapeInterval"),
        ({"tpu-vllm:monitoring.scrapeInterval": "often"}, "monitoring.scrapeInterval"),
        ({"tpu-vllm:monitoring.uptimeCheck": "yes"}, "monitoring.uptimeCheck"),
        ({"tpu-vllm:monitoring.notificationChannels": ["alerts@example.com"]},
         "monitoring.notificationChannels"),
        ({"tpu-vllm:monitoring.enabled": False, **ALERTS}, "monitoring.notificationChannels"),
        ({"tpu-vllm:monitoring.scrape": "30s"}, "monitoring.scrape"),
    ],
)  # fmt: skip
def test_bad_monitoring_values_are_refused_before_any_resource(
    changes: dict[str, Any], key: str
) -> None:
    run = run_program("v5e1", changes, expect_error=True)
    assert isinstance(run.error, ConfigError)
    assert f"tpu-vllm:{key}" in str(run.error)
    assert "Fix:" in str(run.error)
    assert run.resources == [] or all(r.type == "pulumi:pulumi:Stack" for r in run.resources)


def test_defaults_are_metrics_logs_and_dashboard_on_uptime_and_alerts_off() -> None:
    run = run_program("v5e1")
    assert len(run.of_type(DASHBOARD)) == 1
    assert run.of_type(UPTIME_CHECK) == [] and run.of_type(ALERT) == []
    assert run.outputs["uptime_check"] == ""
    assert stack_file_config("v5e1").get("tpu-vllm:monitoring") is None  # defaults only


# -- the resources ---------------------------------------------------------------------------


def dashboard_body(run: ProgramRun) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(run.one(DASHBOARD).inputs["dashboardJson"])
    return body


def test_vm_node_gets_only_metric_and_log_writer_roles_on_its_own_account() -> None:
    run = run_program("v5e1")
    grants = {r.inputs["role"]: r.inputs["member"] for r in run.of_type(IAM)}
    assert grants == {
        "roles/monitoring.metricWriter": f"serviceAccount:{NODE_SA}",
        "roles/logging.logWriter": f"serviceAccount:{NODE_SA}",
    }  # fmt: skip
    off = run_program("v5e1", {"tpu-vllm:monitoring.enabled": False})
    assert off.of_type(IAM) == [] and off.of_type(DASHBOARD) == []


def test_vm_dashboard_url_logs_command_and_url_name_this_stack() -> None:
    run = run_program("v5e1")
    assert run.outputs["dashboard_url"] == (
        f"https://console.cloud.google.com/monitoring/dashboards/builder/{DASHBOARD_ID}"
        "?project=test-project"
    )
    command = run.outputs["logs_command"]
    assert command.startswith("gcloud logging read ")
    assert 'logName="projects/test-project/logs/gcplogs-docker-driver"' in command
    assert 'jsonPayload.container.metadata.tpu_vllm_stack="v5e1"' in command
    assert "--project=test-project" in command
    # gcloud drops --freshness under --order=asc and would read the whole retention.
    assert "--freshness=1d" in command and "--limit=1000" in command
    assert "--order" not in command
    assert run.outputs["logs_url"].startswith("https://console.cloud.google.com/logs/query;query=")
    assert "gcplogs-docker-driver" in run.outputs["logs_url"]
    assert violations(dashboard_body(run), "monitoring.v1", "Dashboard") == []


def test_uptime_check_opens_the_serving_port_to_googles_ipv4_checkers_only() -> None:
    run = run_program("v5e1", UPTIME)
    check = run.one(UPTIME_CHECK).inputs
    assert check["httpCheck"]["path"] == "/health"
    assert check["monitoredResource"]["labels"]["host"]  # the node's address
    assert (
        run.outputs["uptime_check"] == f"projects/test-project/uptimeCheckConfigs/{UPTIME_CHECK_ID}"
    )
    [rule] = [r for r in run.of_type(FIREWALL) if r.name == "tpu-uptime-check"]
    ipv4 = sorted(f"{ip['ipAddress']}/32" for ip in UPTIME_CHECK_IPS if ":" not in ip["ipAddress"])
    assert sorted(rule.inputs["sourceRanges"]) == ipv4
    assert rule.inputs["allows"] == [{"protocol": "tcp", "ports": ["8000"]}]
    assert rule.inputs["priority"] == 1
    # The uptime tile and the endpoint-down alert read this check.
    assert UPTIME_CHECK_ID in json.dumps(dashboard_body(run))
    without = run_program("v5e1")
    assert not [r for r in without.of_type(FIREWALL) if r.name == "tpu-uptime-check"]


def test_alert_policies_exist_only_with_notification_channels() -> None:
    run = run_program("v5e1", {**ALERTS, **UPTIME})
    policies = run.of_type(ALERT)
    assert {p.name for p in policies} == {
        "monitoring-alert-endpoint-down", "monitoring-alert-kv-cache-full",
        "monitoring-alert-waiting-growing",
    }  # fmt: skip
    for policy in policies:
        assert policy.inputs["notificationChannels"] == [CHANNEL]
        [condition] = policy.inputs["conditions"]
        query = condition["conditionPrometheusQueryLanguage"]["query"]
        assert parse_errors([query]) == {}
    down = next(p for p in policies if p.name.endswith("endpoint-down"))
    assert UPTIME_CHECK_ID in json.dumps(down.inputs)


def test_gke_created_cluster_switches_managed_collection_on_and_scrapes_the_pods() -> None:
    run = run_program("v6e4-gke")
    [cluster] = run.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["monitoringConfig"]["managedPrometheus"]["enabled"] is True
    # Named: left out, the provider sends an empty set, which turns GKE's system metrics off.
    assert cluster.inputs["monitoringConfig"]["enableComponents"] == ["SYSTEM_COMPONENTS"]
    [monitor] = [r for r in run.resources if r.type.endswith(":PodMonitoring")]
    spec = monitor.inputs["spec"]
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "server"
    assert spec["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    assert monitor.inputs["metadata"]["name"] == vm.job_name("v6e4-gke")
    command = run.outputs["logs_command"]
    assert (
        'resource.type="k8s_container"' in command
        and 'namespace_name="tpu-vllm-v6e4-gke"' in command
    )
    body = dashboard_body(run)
    assert any('namespace_name="tpu-vllm-v6e4-gke"' in q for q in bodies.promql(body))
    assert violations(body, "monitoring.v1", "Dashboard") == []
    off = run_program("v6e4-gke", {"tpu-vllm:monitoring.enabled": False})
    [plain] = off.of_type("gcp:container/cluster:Cluster")
    assert "monitoringConfig" not in plain.inputs
    assert not [r for r in off.resources if r.type.endswith(":PodMonitoring")]


def test_existing_cluster_without_managed_collection_warns_and_creates_no_pod_monitoring() -> None:
    off = [{"managedPrometheuses": [{"enabled": False, "autoMonitoringConfigs": []}]}]
    run = run_program("v6e4-gke", {"tpu-vllm:gke.cluster": "shared"},
                      call=existing_cluster(monitoringConfigs=off))  # fmt: skip
    warning = [w for w in run.warnings if "managed collection off" in w]
    assert warning and "--enable-managed-prometheus" in warning[0]
    assert not [r for r in run.resources if r.type.endswith(":PodMonitoring")]
    on = [{"managedPrometheuses": [{"enabled": True, "autoMonitoringConfigs": []}]}]
    run = run_program("v6e4-gke", {"tpu-vllm:gke.cluster": "shared"},
                      call=existing_cluster(monitoringConfigs=on))  # fmt: skip
    assert not [w for w in run.warnings if "managed collection off" in w]
    assert [r for r in run.resources if r.type.endswith(":PodMonitoring")]


def test_gke_uptime_check_adds_the_checkers_to_the_load_balancer_ranges() -> None:
    run = run_program("v6e4-gke", UPTIME)
    service = run.one("kubernetes:core/v1:Service").inputs
    ranges = service["spec"]["loadBalancerSourceRanges"]
    assert "192.0.2.10/32" in ranges and not any(":" in r for r in ranges)
    assert run.one(UPTIME_CHECK).inputs["monitoredResource"]["labels"]["host"] == LB_ADDRESS


@pytest.mark.parametrize("stack", ["v5e1", "v6e4-gke"])
@pytest.mark.parametrize("uptime", [False, True], ids=["no-uptime-check", "uptime-check"])
def test_alert_policies_wait_for_the_servers_readiness(stack: str, uptime: bool) -> None:
    """A policy made before the first server answers fires its "down"
    condition during a cold start and pages the channels. Like the uptime check, every policy
    is created only after the readiness check (`vllm-ready`: the VM's remote Command, GKE's
    Job)."""
    run = run_program(stack, {**ALERTS, **(UPTIME if uptime else {})})
    policies = run.of_type(ALERT)
    assert len(policies) == 3
    for policy in policies:
        assert "vllm-ready" in run.dependencies[policy.name], policy.name
    if uptime:
        assert "vllm-ready" in run.dependencies["monitoring-uptime-check"]


# -- windows and the scrape interval ---------------------------------------------------------------

#: `name{matchers}[window]`: every range selector the bodies write names its metric and matchers.
RANGE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{[^}]*\}\[(\d+)([smh])\]")
SECONDS = {"s": 1, "m": 60, "h": 3600}


def windows(queries: list[str]) -> list[tuple[str, int]]:
    """(metric, window in seconds) of every range selector; a query with brackets that are not
    such a selector fails here rather than going unchecked."""
    found = []
    for query in queries:
        ranges = RANGE.findall(query)
        assert len(ranges) == query.count("["), query
        found += [(name, int(n) * SECONDS[unit]) for name, n, unit in ranges]
    return found


def test_the_window_check_reads_every_selector_and_can_fail() -> None:
    assert windows(['sum(rate(vllm:x_total{job="j"}[2m]))', "avg_over_time(up{a=\"b\"}[90s])"]) == [
        ("vllm:x_total", 120), ("up", 90)
    ]  # fmt: skip
    with pytest.raises(AssertionError):
        windows(["sum(rate(vllm:x_total[5m]))"])  # no matchers: not recognised, not skipped


@pytest.mark.parametrize("interval", ["10s", "5m"], ids=["min", "max"])
@pytest.mark.parametrize("stack", ["v5e1", "v6e4-gke"])
def test_every_window_spans_four_scrapes_at_the_interval_bounds(stack: str, interval: str) -> None:
    """With `monitoring.scrapeInterval` at 5 min, fixed 5 min windows held one or two samples
    and every rate and quantile tile was empty. Each window over a scraped series now spans at
    least four scrapes (and never less than before); the uptime check's own windows span four
    of its 60 s checks. The queries still parse with Prometheus' parser."""
    seconds = {"10s": 10, "5m": 300}[interval]
    assert seconds in (MIN_SCRAPE_SECONDS, MAX_SCRAPE_SECONDS)
    run = run_program(stack, {**ALERTS, **UPTIME, "tpu-vllm:monitoring.scrapeInterval": interval})
    queries = bodies.promql(dashboard_body(run))
    for policy in run.of_type(ALERT):
        queries += [
            c["conditionPrometheusQueryLanguage"]["query"] for c in policy.inputs["conditions"]
        ]
    assert len(run.of_type(ALERT)) == 3 and len(queries) >= 16
    found = windows(queries)
    scraped = [(n, w) for n, w in found if n.startswith("vllm:")]
    assert len(scraped) >= 8  # 6 rates or quantiles a kind of tile, and the two alerts' windows
    for name, window in found:
        period = seconds if name.startswith("vllm:") else 60  # uptime_check/check_passed
        assert window >= 4 * period, (name, window, interval)
        assert window >= 300, (name, window)  # the default's windows never shrink
    assert parse_errors(queries) == {}


# -- the VM's TPU tiles ---------------------------------------------------------------------


def test_vm_tpu_tiles_show_only_this_stacks_nodes_current_and_successor() -> None:
    """Cloud TPU's runtime metrics are written on the `tpu_worker` resource, labelled with the
    node's `node_id`: the tiles pick the node ids the stack's queued resource may hold, the one
    it has and the renewal's successor (both serve during a renewal), so two VM stacks in one
    project no longer share duty cycle and HBM."""
    run = run_program("v5e1")
    spec = Spec.from_props(run.named("tpu-qr").inputs)
    wanted = [spec.in_slot(slot).node_id for slot in SLOTS]
    assert wanted == ["tpu-vllm-v5e1-node", "tpu-vllm-v5e1-node-b"]
    tiles = {
        t["widget"]["title"]: bodies.promql(t["widget"])
        for t in dashboard_body(run)["mosaicLayout"]["tiles"]
    }
    tpu = {title: qs for title, qs in tiles.items() if title.startswith("TPU ")}
    assert len(tpu) == 2 and all("every TPU VM" not in title for title in tpu)
    for [query] in tpu.values():
        matcher = re.search(r'node_id=~"([^"]*)"', query)
        assert matcher is not None and 'monitored_resource="tpu_worker"' in query, query
        assert matcher.group(1).split("|") == wanted
        # Anchored as PromQL anchors =~: another stack's nodes do not match.
        other = node_ids("v5e1-other")
        assert not any(re.fullmatch(matcher.group(1), node) for node in other)
        assert all(re.fullmatch(matcher.group(1), node) for node in wanted)
    assert parse_errors([q for qs in tpu.values() for q in qs]) == {}


# -- labels and job names ----------------------------------------------------------------

#: Cloud Monitoring label keys and values: lowercase letters, digits, `_` and `-`, up to 63.
MONITORING_LABEL = re.compile(r"[a-z0-9_-]{0,63}")


def test_alert_and_uptime_labels_use_the_cleaned_stack_name_as_the_dashboard_does() -> None:
    """A Pulumi stack name may hold capitals and dots, which Monitoring refuses in a label:
    the policies' and the uptime check's `tpu-vllm-stack` label is the name the dashboard's
    label already used, cleaned."""
    stack = "Team.Prod_V5e1-" + "x" * 60
    watch = bodies.Watch(stack, "vm", vm.queries_for(stack), None, UPTIME_CHECK_ID,
                         node_ids(stack))  # fmt: skip
    values = [bodies.uptime_check(stack, "p", "h", 1)["userLabels"]["tpu-vllm-stack"]]
    values += [
        body["userLabels"]["tpu-vllm-stack"]
        for body in bodies.alert_policies(watch, [CHANNEL]).values()
    ]
    assert len(values) == 4 and len(set(values)) == 1
    [value] = set(values)
    assert MONITORING_LABEL.fullmatch(value), value
    assert value.startswith("team-prod_v5e1-x")
    dashboard_keys = set(bodies.dashboard(watch)["labels"]) - {"tpu-vllm"}
    [key] = dashboard_keys
    assert MONITORING_LABEL.fullmatch(key) and key.startswith("stack-team-prod_v5e1-x")
    # Names that were valid already keep their value.
    assert bodies.uptime_check("v5e1", "p", "h", 1)["userLabels"] == {"tpu-vllm-stack": "v5e1"}


def test_long_stack_names_that_share_30_characters_get_two_job_names() -> None:
    """Both stacks' series would carry one `job` and mix in each other's dashboard and alerts;
    a short hash of the full name now ends a truncated job name. Short names are unchanged."""
    a, b = "production-v6e4-gke-europe-a", "production-v6e4-gke-europe-b"
    assert resource_id(a) == resource_id(b)  # what the job names were
    jobs = {vm.job_name(a), vm.job_name(b)}
    assert len(jobs) == 2
    for job in jobs:
        assert len(job) <= 30 and re.fullmatch(r"[a-z][-a-z0-9]*[a-z0-9]", job), job
        assert job.startswith("tpu-vllm-production-v6e-")
    assert vm.job_name(a) == vm.job_name(a)  # stable from one run to the next
    assert vm.job_name("v5e1") == "tpu-vllm-v5e1"
    assert vm.job_name("v6e4-gke") == "tpu-vllm-v6e4-gke"
    assert f'job="{vm.job_name(a)}"' in vm.queries_for(a).selector
