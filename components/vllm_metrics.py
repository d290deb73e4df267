"""The vLLM metric names the stack queries, and the PromQL it queries them with.

Names are vLLM 0.32.0's (`vllm/v1/metrics/loggers.py`) as scraped (a counter gets `_total`), each
in tests/support/fixtures/vllm_metrics/v6e4_metrics.txt. Both collectors set `job` to a name the
stack chooses, so one selector finds its servers on either backend. Cloud Monitoring's own metrics
go by "Mapping Cloud Monitoring metrics to PromQL".
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
REQUEST_SUCCESS = "vllm:request_success_total"
TTFT = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"  # noqa: S105 - a metric name
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
HISTOGRAMS = (TTFT, INTER_TOKEN_LATENCY, E2E_LATENCY)
#: Every vLLM series the dashboard, the alerts or scripts/status.py read.
USED = (RUNNING, WAITING, KV_CACHE_USAGE, PROMPT_TOKENS, GENERATION_TOKENS, PREEMPTIONS,
        REQUEST_SUCCESS, *(f"{h}_bucket" for h in HISTOGRAMS))  # fmt: skip

#: Names of earlier engines that vLLM 0.32.0 no longer registers.
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

#: Cloud TPU's metrics of a TPU VM ("Monitor TPUs") and GKE's of a container's TPUs.
TPU_VM_DUTY_CYCLE = "tpu_googleapis_com:accelerator_duty_cycle"
TPU_VM_HBM_USED = "tpu_googleapis_com:accelerator_memory_used"
GKE_DUTY_CYCLE = "kubernetes_io:container_accelerator_duty_cycle"
GKE_HBM_USED = "kubernetes_io:container_accelerator_memory_used"
#: The uptime check's result per checker location, 1 when the check passed.
UPTIME_CHECK_PASSED = "monitoring_googleapis_com:uptime_check_check_passed"


def job_name(stack: str) -> str:
    return distinct_id(stack)


#: Scrapes a range selector spans at least: rate() and the quantiles need two samples, and a
#: missed scrape takes one away (Grafana's `$__rate_interval` is max(step + scrape, 4 x scrape)).
#: The windows grow with a slow `monitoring.scrapeInterval` so its dashboard still draws.
SCRAPES_PER_WINDOW = 4
#: The shortest windows: the dashboard's rates and quantiles, and the alerts'.
RATE_WINDOW_SECONDS = 300
ALERT_WINDOW_SECONDS = 600


def window_seconds(scrape_seconds: int, at_least: int) -> int:
    return max(at_least, SCRAPES_PER_WINDOW * scrape_seconds)


def promql_duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


@dataclass(frozen=True)
class Queries:
    """PromQL for one stack's servers: the dashboard's, the alerts' and status.py's."""

    selector: str
    scrape_seconds: int = DEFAULT_SCRAPE_SECONDS

    @property
    def rate_window(self) -> str:
        return promql_duration(window_seconds(self.scrape_seconds, RATE_WINDOW_SECONDS))

    @property
    def alert_window(self) -> str:
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
