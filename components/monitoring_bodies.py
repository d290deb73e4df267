"""The dashboard, the uptime check and the alert policies as Cloud Monitoring REST bodies.

Pure functions, so the tests can validate the bodies against the Monitoring API's discovery
documents and parse every PromQL expression with Prometheus' own parser
(tests/mocked/test_monitoring.py); components/monitoring.py hands the same bodies to pulumi-gcp
(`pulumi_args`: the REST fields in snake_case).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components import vllm_metrics
from components.config import Backend
from components.naming import label_value
from components.vllm_metrics import Queries

#: Mosaic layout columns (Monitoring v1 MosaicLayout: 48 is the console's grid).
COLUMNS = 48
TILE_WIDTH = 24
TILE_HEIGHT = 16
#: Sustained this long before an alert fires: a burst is not an incident.
KV_ALERT_DURATION = "600s"
KV_ALERT_THRESHOLD = 0.9
WAITING_ALERT_DURATION = "600s"
DOWN_ALERT_DURATION = "300s"
#: The uptime check: every minute, 10 s per try (Monitoring v3 UptimeCheckConfig).
UPTIME_PERIOD = "60s"
UPTIME_TIMEOUT = "10s"


@dataclass(frozen=True)
class Watch:
    stack: str
    backend: Backend
    queries: Queries
    #: The stack's GKE namespace (TPU metrics per container); None on the VM backend.
    namespace: str | None = None
    uptime_check_id: str | None = None
    #: VM: the node ids the stack's TPU may have (its own and the renewal's successor).
    tpu_nodes: tuple[str, ...] = ()


def _chart(title: str, series: Sequence[tuple[str, str]], unit: str = "") -> dict[str, Any]:
    data_sets = []
    for legend, query in series:
        tsq: dict[str, Any] = {"prometheusQuery": query}
        if unit:
            tsq["unitOverride"] = unit
        data_set: dict[str, Any] = {"timeSeriesQuery": tsq, "plotType": "LINE", "targetAxis": "Y1"}
        if legend:  # none: the console names each series by its labels (finished_reason)
            data_set["legendTemplate"] = legend
        data_sets.append(data_set)
    return {"title": title, "xyChart": {"dataSets": data_sets, "chartOptions": {"mode": "COLOR"}}}


def _tpu_charts(watch: Watch) -> list[dict[str, Any]]:
    if watch.backend == "gke":
        where = f'monitored_resource="k8s_container",namespace_name="{watch.namespace}"'
        duty, hbm = (
            f"{vllm_metrics.GKE_DUTY_CYCLE}{{{where}}}",
            f"{vllm_metrics.GKE_HBM_USED}{{{where}}}",
        )
        scope = "this stack's pods"
    else:
        # Cloud TPU's metrics are on the `tpu_worker` resource; its `node_id` label picks this
        # stack's nodes, the current one and a renewal's successor ("Monitored resource types").
        if not watch.tpu_nodes or not all(re.fullmatch(r"[a-z0-9-]+", n) for n in watch.tpu_nodes):
            raise ValueError(f"TPU node ids [a-z0-9-]+ are needed, got {watch.tpu_nodes!r}")
        where = f'monitored_resource="tpu_worker",node_id=~"{"|".join(watch.tpu_nodes)}"'
        duty = f"{vllm_metrics.TPU_VM_DUTY_CYCLE}{{{where}}}"
        hbm = f"{vllm_metrics.TPU_VM_HBM_USED}{{{where}}}"
        scope = "this stack's TPU VM"
    return [
        _chart(f"TPU duty cycle ({scope})", [("max", f"max({duty})")], "%"),
        _chart(f"TPU HBM used ({scope})", [("sum", f"sum({hbm})")], "By"),
    ]


def uptime_selector(check_id: str) -> str:
    """`check_passed` of this check, on `uptime_url` (the metric is written for several
    resource types, so the query names one)."""
    where = f'monitored_resource="uptime_url",check_id="{check_id}"'
    return f"{vllm_metrics.UPTIME_CHECK_PASSED}{{{where}}}"


def uptime_passed_query(check_id: str) -> str:
    """The fraction of checker locations whose last check passed; the check runs every minute
    whatever the scrape interval, so its 5 min window is fixed."""
    return f"avg(avg_over_time({uptime_selector(check_id)}[5m]))"


def _uptime_chart(watch: Watch) -> dict[str, Any]:
    q = watch.queries
    series = [("servers reporting metrics", q.servers_reporting())]
    if watch.uptime_check_id:
        series.insert(
            0, ("uptime check passing (fraction)", uptime_passed_query(watch.uptime_check_id))
        )
    return _chart("Endpoint up", series)


def _text(watch: Watch) -> dict[str, Any]:
    uptime = (
        "Uptime check: `/health` each minute."
        if watch.uptime_check_id
        else "No uptime check: *Endpoint up* counts servers reporting."
    )
    content = (
        f"**tpu-vllm `{watch.stack}`** ({watch.backend}): vLLM `/metrics`, "
        f'`job="{vllm_metrics.job_name(watch.stack)}"`. {uptime} Log: output `logs_command`.'
    )
    return {"title": "About this dashboard", "text": {"content": content, "format": "MARKDOWN"}}


def dashboard_widgets(watch: Watch) -> list[dict[str, Any]]:
    q = watch.queries
    pct = [0.5, 0.95]

    def quantiles(histogram: str) -> list[tuple[str, str]]:
        return [(f"p{round(p * 100)}", q.quantile(p, histogram)) for p in pct]

    return [
        _text(watch),
        _uptime_chart(watch),
        _chart("Requests running and waiting",
               [("running", q.gauge_sum(vllm_metrics.RUNNING)),
                ("waiting", q.gauge_sum(vllm_metrics.WAITING))]),
        _chart("Tokens per second",
               [("prompt", q.rate_sum(vllm_metrics.PROMPT_TOKENS)),
                ("generation", q.rate_sum(vllm_metrics.GENERATION_TOKENS))]),
        _chart("Time to first token", quantiles(vllm_metrics.TTFT), "s"),
        _chart("Inter-token latency", quantiles(vllm_metrics.INTER_TOKEN_LATENCY), "s"),
        _chart("End-to-end request latency", quantiles(vllm_metrics.E2E_LATENCY), "s"),
        _chart("KV-cache usage", [("max", f"100 * {q.kv_cache_max()}")], "%"),
        _chart("Preemptions per second", [("preemptions", q.rate_sum(vllm_metrics.PREEMPTIONS))]),
        _chart("Request outcomes per second",
               [("", q.rate_sum(vllm_metrics.REQUEST_SUCCESS, by="finished_reason"))]),
        *_tpu_charts(watch),
    ]  # fmt: skip


def dashboard(watch: Watch) -> dict[str, Any]:
    """The Monitoring v1 `Dashboard` body: two tiles a row."""
    tiles = []
    for index, widget in enumerate(dashboard_widgets(watch)):
        tile = {
            "xPos": (index % 2) * TILE_WIDTH,
            "yPos": (index // 2) * TILE_HEIGHT,
            "width": TILE_WIDTH,
            "height": TILE_HEIGHT,
            "widget": widget,
        }
        # The API leaves zero positions out of what it returns; sending them would show a diff on
        # every refresh (hashicorp/terraform-provider-google #7242).
        tiles.append({k: v for k, v in tile.items() if not (k in ("xPos", "yPos") and v == 0)})
    return {
        "displayName": f"tpu-vllm {watch.stack}",
        "labels": {"tpu-vllm": "", label_value(f"stack-{watch.stack}"): ""},
        "mosaicLayout": {"columns": COLUMNS, "tiles": tiles},
    }


def promql(widget_or_body: Any) -> list[str]:
    """Every PromQL expression in a body."""
    found: list[str] = []
    if isinstance(widget_or_body, Mapping):
        for key, value in widget_or_body.items():
            if key in ("prometheusQuery", "query") and isinstance(value, str):
                found.append(value)
            else:
                found += promql(value)
    elif isinstance(widget_or_body, list):
        for item in widget_or_body:
            found += promql(item)
    return found


def uptime_check(stack: str, project: str, host: str, port: int) -> dict[str, Any]:
    """The Monitoring v3 `UptimeCheckConfig` body: GET http://HOST:PORT/health, 2xx passes."""
    return {
        "displayName": f"tpu-vllm {stack} /health",
        "monitoredResource": {
            "type": "uptime_url",
            "labels": {"project_id": project, "host": host},
        },
        "httpCheck": {
            "requestMethod": "GET",
            "path": "/health",
            "port": port,
            "useSsl": False,
            "acceptedResponseStatusCodes": [{"statusClass": "STATUS_CLASS_2XX"}],
        },
        "period": UPTIME_PERIOD,
        "timeout": UPTIME_TIMEOUT,
        "checkerType": "STATIC_IP_CHECKERS",
        "userLabels": {"tpu-vllm-stack": label_value(stack)},
    }


@dataclass(frozen=True)
class _Alert:
    what: str
    query: str
    duration: str
    doc: str
    severity: str


def _policy(stack: str, alert: _Alert, channels: Sequence[str]) -> dict[str, Any]:
    what = alert.what
    return {
        "displayName": f"tpu-vllm {stack}: {what}",
        "combiner": "OR",
        "conditions": [
            {
                "displayName": what,
                "conditionPrometheusQueryLanguage": {
                    "query": alert.query,
                    "duration": alert.duration,
                    "evaluationInterval": "60s",
                    # Made before the first scrape: the metric may not exist yet.
                    "disableMetricValidation": True,
                },
            }
        ],
        "documentation": {
            "content": alert.doc,
            "mimeType": "text/markdown",
            "subject": f"tpu-vllm {stack}: {what}",
        },
        "notificationChannels": list(channels),
        "alertStrategy": {"autoClose": "1800s"},
        "severity": alert.severity,
        "userLabels": {"tpu-vllm-stack": label_value(stack)},
    }


def alert_policies(watch: Watch, channels: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The Monitoring v3 `AlertPolicy` bodies by short name."""
    q = watch.queries
    if watch.uptime_check_id:
        passed = uptime_selector(watch.uptime_check_id)
        down = f"max(max_over_time({passed}[5m])) < 1"
        down_doc = "No uptime-check location got a 2xx from `/health` for 5 minutes."
    else:
        down = f"absent_over_time({q.series(vllm_metrics.RUNNING)}[{q.alert_window}])"
        down_doc = f"No vLLM server of the stack reported metrics for {_spoken(q.alert_window)}."
    fix = "See `logs_command` and `.venv/bin/python -m scripts.status STACK`.".replace(
        "STACK", watch.stack
    )
    alerts = {
        "endpoint-down": _Alert(
            "endpoint down", down, DOWN_ALERT_DURATION, f"{down_doc} {fix}", "CRITICAL"
        ),
        "kv-cache-full": _Alert(
            "KV cache near full",
            f"{q.kv_cache_max()} > {KV_ALERT_THRESHOLD}",
            KV_ALERT_DURATION,
            f"KV-cache usage above {KV_ALERT_THRESHOLD:.0%} for 10 minutes: requests queue "
            f"and get preempted. {fix}",
            "WARNING",
        ),
        "waiting-growing": _Alert(
            "waiting requests growing",
            # delta() of the gauge rather than a subquery: plain range selectors only.
            f"{q.gauge_sum(vllm_metrics.WAITING)} > 0 "
            f"and sum(delta({q.series(vllm_metrics.WAITING)}[{q.alert_window}])) > 0",
            WAITING_ALERT_DURATION,
            f"Requests waiting and their number rising over {_spoken(q.alert_window)}: the "
            f"servers cannot keep up. {fix}",
            "WARNING",
        ),
    }
    return {short: _policy(watch.stack, alert, channels) for short, alert in alerts.items()}


def _spoken(duration: str) -> str:
    unit = "minutes" if duration.endswith("m") else "seconds"
    return f"{duration[:-1]} {unit}"


_MAPS = {"labels", "userLabels", "headers"}


def pulumi_args(body: Mapping[str, Any]) -> dict[str, Any]:
    """The REST body in pulumi-gcp's spelling: snake_case field names (map keys kept)."""

    def snake(name: str) -> str:
        return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()

    def convert(value: Any, is_map: bool = False) -> Any:
        if isinstance(value, Mapping):
            if is_map:
                return dict(value)
            return {snake(k): convert(v, k in _MAPS) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    converted: dict[str, Any] = convert(body)
    return converted
