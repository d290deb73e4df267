"""The vLLM metric names the stack queries, and the PromQL it queries them with.

Names come from the engine the image runs: vLLM 0.32.0 `vllm/v1/metrics/loggers.py`
(`PrometheusStatLogger`, from the vllm-tpu 0.32.0 sdist; tpu-inference adds no serving metric).
prometheus_client appends `_total` to a counter's name when it renders it, so the counter
`vllm:prompt_tokens` is scraped as `vllm:prompt_tokens_total`; histograms as `_bucket`, `_sum`,
`_count`. Every name here appears in tests/support/fixtures/vllm_metrics/v6e4_metrics.txt, and none
of `REMOVED` does (tests/mocked/test_monitoring.py).

Cloud Monitoring stores what Managed Service for Prometheus (GKE) or the Ops Agent's Prometheus
receiver (VM) scrapes as `prometheus.googleapis.com/NAME/KIND` on the `prometheus_target`
resource, and PromQL queries it by its Prometheus name. Both collectors set `job`: GMP to the
PodMonitoring's name (prometheus-engine `pkg/operator/apis/monitoring/v1/pod_config.go`), the Ops
Agent to the scrape config's `job_name`; the stack names both `tpu-vllm-STACK`, so one selector
finds this stack's servers on either backend, across renewals (each node has a new instance).

Cloud Monitoring's own metrics are queried by the documented mapping (first `/` to `:`, every
other special character to `_`: "Mapping Cloud Monitoring metrics to PromQL"):
`tpu.googleapis.com/accelerator/duty_cycle` is `tpu_googleapis_com:accelerator_duty_cycle`.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.config import DEFAULT_SCRAPE_SECONDS
from components.naming import distinct_id

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # 0..1; V0's vllm:gpu_cache_usage_perc is gone
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
#: Finished requests by `finished_reason` (stop, length, abort, error, repetition).
REQUEST_SUCCESS = "vllm:request_success_total"
TTFT = "vllm:time_to_first_token_seconds"
#: Per decoded token; V0's vllm:time_per_output_token_seconds was renamed to this.
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"  # noqa: S105 - a metric name
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
HISTOGRAMS = (TTFT, INTER_TOKEN_LATENCY, E2E_LATENCY)
#: Every vLLM series the dashboard, the alerts or scripts/status.py read.
USED = (RUNNING, WAITING, KV_CACHE_USAGE, PROMPT_TOKENS, GENERATION_TOKENS, PREEMPTIONS,
        REQUEST_SUCCESS, *(f"{h}_bucket" for h in HISTOGRAMS))  # fmt: skip

#: Names of earlier engines that vLLM 0.32.0 no longer registers (none of them is in its
#: loggers.py): V0's, and V1's deprecated ones past `--show-hidden-metrics-for-version`.
REMOVED = (
    "vllm:gpu_cache_usage_perc",
    "vllm:cpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:cpu_prefix_cache_hit_rate",
    "vllm:gpu_prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits",
    "vllm:time_per_output_token_seconds",
    "vllm:num_requests_swapped",
    "vllm:avg_prompt_throughput_toks_per_s",
    "vllm:avg_generation_throughput_toks_per_s",
    "vllm:model_forward_time_milliseconds",
    "vllm:model_execute_time_milliseconds",
)

#: Cloud TPU's runtime metrics of a TPU VM (Cloud TPU docs "Monitor TPUs"), in PromQL.
TPU_VM_DUTY_CYCLE = "tpu_googleapis_com:accelerator_duty_cycle"
TPU_VM_HBM_USED = "tpu_googleapis_com:accelerator_memory_used"
#: GKE system metrics of a container's accelerators ("Kubernetes metrics":
#: kubernetes.io/container/accelerator/duty_cycle and .../memory_used, resource k8s_container).
GKE_DUTY_CYCLE = "kubernetes_io:container_accelerator_duty_cycle"
GKE_HBM_USED = "kubernetes_io:container_accelerator_memory_used"
#: The uptime check's result per checker location (monitoring.googleapis.com/uptime_check/
#: check_passed, resource uptime_url), 1 when the check passed.
UPTIME_CHECK_PASSED = "monitoring_googleapis_com:uptime_check_check_passed"


def job_name(stack: str) -> str:
    """The `job` label of this stack's scrape target, on both backends (a hash keeps two long
    stack names apart: components/naming.py `distinct_id`)."""
    return distinct_id(stack)


#: Scrapes a range selector spans at least. rate(), delta() and the quantiles need two samples
#: in their window, and a missed or late scrape takes one away: the usual rule is a window of
#: four scrape intervals or more (Grafana's `$__rate_interval` is max(step + scrape, 4 x scrape),
#: grafana/grafana #77234 and #84063; Bastos and Araujo, "Hands-On Infrastructure Monitoring with
#: Prometheus", ch. 7, "Having enough data to work with"). `monitoring.scrapeInterval` may be up to
#: 5 min, so the windows grow with it instead of the interval being capped: a slower scrape is
#: chosen to ingest (and pay for) fewer samples, and its dashboard should still draw.
SCRAPES_PER_WINDOW = 4
#: The shortest windows, for the default 30 s scrape: rates and quantiles over 5 min, the
#: alerts' "nothing arrived" and "rising" over 10 min.
RATE_WINDOW_SECONDS = 300
ALERT_WINDOW_SECONDS = 600


def window_seconds(scrape_seconds: int, at_least: int) -> int:
    """A range selector's length: `at_least`, or four scrapes when that is longer."""
    return max(at_least, SCRAPES_PER_WINDOW * scrape_seconds)


def promql_duration(seconds: int) -> str:
    """`20m`, or `280s` when not whole minutes (PromQL durations take either)."""
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


@dataclass(frozen=True)
class Queries:
    """PromQL for one stack's servers: the dashboard's, the alerts' and status.py's."""

    #: Label matchers inside `{...}` that pick this stack's vLLM series.
    selector: str
    #: `monitoring.scrapeInterval`: how far apart the samples of those series are.
    scrape_seconds: int = DEFAULT_SCRAPE_SECONDS

    @property
    def rate_window(self) -> str:
        """The window of every rate() and quantile: 5 min, or four scrapes."""
        return promql_duration(window_seconds(self.scrape_seconds, RATE_WINDOW_SECONDS))

    @property
    def alert_window(self) -> str:
        """The alerts' window over vLLM series: 10 min, or four scrapes."""
        return promql_duration(window_seconds(self.scrape_seconds, ALERT_WINDOW_SECONDS))

    def series(self, name: str, extra: str = "") -> str:
        matchers = ",".join(m for m in (self.selector, extra) if m)
        return f"{name}{{{matchers}}}"

    def gauge_sum(self, name: str) -> str:
        return f"sum({self.series(name)})"

    def rate_sum(self, name: str, by: str = "") -> str:
        grouping = f" by ({by})" if by else ""
        return f"sum{grouping}(rate({self.series(name)}[{self.rate_window}]))"

    def quantile(self, q: float, histogram: str) -> str:
        buckets = self.series(f"{histogram}_bucket")
        return f"histogram_quantile({q}, sum by (le)(rate({buckets}[{self.rate_window}])))"

    def kv_cache_max(self) -> str:
        return f"max({self.series(KV_CACHE_USAGE)})"

    def servers_reporting(self) -> str:
        return f"count({self.series(RUNNING)})"


def queries_for(
    stack: str, namespace: str | None = None, scrape_seconds: int = DEFAULT_SCRAPE_SECONDS
) -> Queries:
    """`job="tpu-vllm-STACK"`, and on GKE the stack's namespace too (a shared cluster)."""
    matchers = [f'job="{job_name(stack)}"']
    if namespace:
        matchers.append(f'namespace="{namespace}"')
    return Queries(",".join(matchers), scrape_seconds)
