"""What one `pulumi up` of a stack can cost, in dollars and in time, before you run it.

A TPU bills by the hour and `pulumi up` can block for hours. Every figure is read from what the
program registers under Pulumi mocks (like `scripts/plan.py`), so the README's summary and
docs/operations.md "Costs and waits", which are this script's output and checked by a test,
follow the stack files, the catalog and the program's own timeouts.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import catalog
from components.config import parse_duration
from components.gke import cluster as gke
from components.gke import k8s_workload, readiness_manifests
from components.ssh_dial import dial_budget_seconds
from components.vm.queued_resource_spec import Timing
from scripts.plan import PLACEHOLDER_PROJECT, after_apply, usd
from scripts.program_runner import ProgramRun, run_program, stack_file_config

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "command:remote:Command"
DYNAMIC = "pulumi-python:dynamic:Resource"
#: The first tier of cloud.google.com/stackdriver/pricing; how it was read: docs/operations.md
#: "What it costs".
PROMETHEUS_USD_PER_MILLION_SAMPLES = 0.06
SECONDS_PER_MONTH = 2_592_000  # 30 days
#: tests/support/fixtures/vllm_metrics/README.md
METRICS_SAMPLE = ROOT / "tests" / "support" / "fixtures" / "vllm_metrics" / "v6e4_metrics.txt"


HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def sample_series(path: Path = METRICS_SAMPLE) -> int:
    """Samples one scrape writes, as Managed Service for Prometheus bills them: a histogram's
    lines of one label set are one distribution point (prometheus-engine
    `pkg/export/transform.go` `buildDistributionFromTraditional`); `_created` lines are gauges
    of their own in vLLM's text format. Why: docs/operations.md "What it costs"."""
    histograms: set[str] = set()
    folded: set[tuple[str, str]] = set()
    others = 0
    for line in path.read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "histogram":
                histograms.add(name)
            continue
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split(" ", 1)[0]
        family = next(
            (name.removesuffix(part) for part in HISTOGRAM_PARTS
             if name.endswith(part) and name.removesuffix(part) in histograms),
            None,
        )  # fmt: skip
        if family is None:
            others += 1
            continue
        labels = re.sub(r'(^|,)le="[^"]*"', "", rest.split("}", 1)[0]).strip(",")
        folded.add((family, labels))
    return others + len(folded)


def metrics_usd_per_month(series: int, scrape_seconds: float, servers: int = 1) -> float:
    samples = series * SECONDS_PER_MONTH / scrape_seconds * servers
    return samples / 1e6 * PROMETHEUS_USD_PER_MILLION_SAMPLES


def _metrics_row(stacks: Sequence[Any]) -> tuple[str, list[str]]:
    series = sample_series()
    cells = []
    for b in stacks:
        if not b.scrape_s:
            cells.append("none (`monitoring.enabled` false)")
            continue
        servers = getattr(b, "replicas", 1)
        usd = metrics_usd_per_month(series, b.scrape_s, servers)
        per = f" x {servers} servers" if servers > 1 else ""
        cells.append(f"{_usd(usd)} ({series} series{per}, every {duration(b.scrape_s)})")
    return (
        "vLLM metrics a month (Managed Service for Prometheus, "
        f"${PROMETHEUS_USD_PER_MILLION_SAMPLES}/million samples; `monitoring.scrapeInterval`)",
        cells,
    )


DAY_SECONDS = 24 * 3600


def day_usd(hourly: float, max_run_hours: float | None, lead_s: float) -> float:
    """The most any 24 hours of a stack kept alive can bill, TPU only. The formula's why:
    docs/operations.md "Costs and waits"."""
    if not max_run_hours or not lead_s:
        return hourly * 24
    run_s = max_run_hours * 3600
    period = run_s - lead_s
    whole, rest = divmod(DAY_SECONDS, period)
    billed = whole * run_s + rest + min(rest, lead_s)
    return hourly * billed / 3600


@dataclass(frozen=True)
class Budget:
    stack: str
    chip: str
    model: str
    provisioning: str
    hourly_usd: float
    max_run_hours: float | None
    max_run_usd: float | None
    zones: int
    capacity_wait_s: float
    provisioning_s: float
    zone_delete_s: float
    host_key_s: float
    dial_limit: int
    dial_timeout_s: float
    secrets_s: float
    readiness_s: float
    #: The model's answers to the readiness check (a chat, and a tool call with a parser).
    answers_s: float = 0.0
    #: 0 lead: nothing ends, so nothing overlaps.
    lead_s: float = 0.0
    drain_s: float = 0.0
    #: `monitoring.scrapeInterval` as the metrics agent's config says; 0 without it.
    scrape_s: float = 0.0

    @property
    def overlap_usd(self) -> float | None:
        """lead + drain, a loose bound: docs/operations.md "Costs and waits, explained"."""
        if not self.lead_s:
            return None
        return round(self.hourly_usd * (self.lead_s + self.drain_s) / 3600, 2)

    @property
    def overlap_tight_usd(self) -> float | None:
        """`lead` alone: Google deletes the old VM at its run end whatever the drain."""
        if not self.lead_s:
            return None
        return round(self.hourly_usd * self.lead_s / 3600, 2)

    @property
    def day_usd(self) -> float:
        return day_usd(self.hourly_usd, self.max_run_hours, self.lead_s)

    @property
    def ssh_s(self) -> float:
        return dial_budget_seconds(self.dial_limit, self.dial_timeout_s)

    @property
    def after_capacity_s(self) -> float:
        """From ACTIVE to a verified endpoint."""
        return self.host_key_s + self.ssh_s + self.secrets_s + self.readiness_s + self.answers_s

    @property
    def worst_case_s(self) -> float:
        """docs/operations.md "The worst case"; or every zone fails, whichever is longer."""
        per_zone = self.capacity_wait_s + self.provisioning_s
        success_last = (
            self.zones * per_zone + (self.zones - 1) * self.zone_delete_s + self.after_capacity_s
        )
        all_fail = self.zones * (per_zone + self.zone_delete_s)
        return max(success_last, all_fail)


@dataclass(frozen=True)
class GkeBudget:
    stack: str
    chip: str
    model: str
    provisioning: str
    replicas: int
    hourly_usd: float
    max_run_hours: float | None
    max_run_usd: float | None
    zones: int
    #: 0 when `gke.cluster` names an existing cluster.
    cluster_s: float
    #: 0 with `gke.cluster` (TPU pools are the ComputeClass's).
    node_pool_s: float
    #: The ComputeClass and SecretProviderClass CRDs (crd_wait.py).
    crd_wait_s: float
    #: It is not: skipAwait.
    load_balancer_awaited: bool
    capacity_wait_s: float
    #: The startup probe's allowance, `vllm.readinessTimeout`.
    readiness_s: float
    #: The old pod's termination grace, the image pull, the cache restore.
    turn_extra_s: float
    #: After the rollout: one bound per question.
    answers_s: float
    #: The readiness Job's own scheduling and image pull, beyond its deadline.
    job_margin_s: float
    #: Node recycling's `renewal.lead`; 0 without a run end.
    lead_s: float = 0.0
    scrape_s: float = 0.0

    @property
    def overlap_usd(self) -> float:
        """Per node and run: the replacement, found at most `lead` early, runs beside it."""
        return self.hourly_usd / self.replicas * self.lead_s / 3600

    @property
    def day_usd(self) -> float:
        return day_usd(self.hourly_usd, self.max_run_hours, self.lead_s)

    @property
    def turns_s(self) -> float:
        """A rolling update replaces the replicas one after the other."""
        return self.replicas * (self.turn_extra_s + self.readiness_s)

    @property
    def rollout_s(self) -> float:
        """A first TPU node (capacity wait), then each replica's turn."""
        return self.capacity_wait_s + self.turns_s

    @property
    def worst_case_s(self) -> float:
        """The cluster; then the system node pool and, beside it, the CRD wait (both need only
        the cluster, and the Deployment needs both); then the readiness Job: the rollout, the
        answers and its margin. The load balancer is not awaited: GKE builds it meanwhile."""
        return (
            self.cluster_s
            + max(self.node_pool_s, self.crd_wait_s)
            + self.rollout_s
            + self.answers_s
            + self.job_margin_s
        )

    @property
    def spare_usd(self) -> float:
        """While the rollout goes well; a build that never answers keeps it (docs/gke.md)."""
        return self.hourly_usd / self.replicas * self.turns_s / 3600


def _one(run: ProgramRun, type_: str, name: str) -> dict[str, Any]:
    [found] = [r for r in run.resources if r.type == type_ and r.name == name]
    return found.inputs


def _unsecret(value: Any) -> Any:
    """Secret inputs arrive wrapped as {sig: ..., value: ...}."""
    if isinstance(value, dict) and "value" in value and len(value) == 2:
        return value["value"]
    return value


def _script_number(script: str, pattern: str) -> float:
    match = re.search(pattern, script)
    assert match, f"{pattern!r} not found in a rendered remote script"
    return float(match.group(1))


def _run(stack: str, changes: Mapping[str, Any] | None) -> ProgramRun:
    project = None if stack_file_config(stack).get("gcp:project") else PLACEHOLDER_PROJECT
    return run_program(stack, changes, project=project, outputs_for=after_apply)


def is_gke(stack: str, changes: Mapping[str, Any] | None = None) -> bool:
    backend = {**stack_file_config(stack), **(changes or {})}.get("tpu-vllm:backend")
    return str(backend or "").strip().lower() == "gke"


def gke_budget(stack: str, changes: Mapping[str, Any] | None = None) -> GkeBudget:
    run = _run(stack, changes)
    node_class = _one(run, "kubernetes:cloud.google.com/v1:ComputeClass", "vllm-compute-class")
    [rule] = node_class["spec"]["priorities"]
    deployment = _one(run, "kubernetes:apps/v1:Deployment", "vllm-deployment")
    job = _one(run, "kubernetes:batch/v1:Job", "vllm-ready")
    [server] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    deadline = float(env["DEADLINE_SECONDS"])
    replicas = int(deployment["spec"]["replicas"])
    pod = deployment["spec"]["template"]["spec"]
    restore = [
        float(e["value"])
        for c in pod.get("initContainers", [])
        for e in c.get("env", [])
        if e["name"] == "CACHE_TIMEOUT"
    ]
    turn_extra = (
        float(pod["terminationGracePeriodSeconds"])
        + float(readiness_manifests.IMAGE_PULL_SECONDS)
        + sum(restore)
    )
    capacity_wait = float(deadline - replicas * (turn_extra + _readiness_seconds(run)))
    # One bound per question the Job asks: the tool call only when it has a body.
    answers = float(env["ANSWER_SECONDS"]) * (2 if env.get("TOOL_BODY") else 1)
    max_run = rule.get("maxRunDurationSeconds")
    max_run_usd = run.outputs.get("max_run_cost_usd")
    creates_cluster = any(r.type == "gcp:container/cluster:Cluster" for r in run.resources)
    flex = rule.get("flexStart") or {}
    provisioning = (
        "flex-start" if flex.get("enabled") else "spot" if rule.get("spot") else "on-demand"
    )
    lead = (flex.get("nodeRecycling") or {}).get("leadTimeSeconds", 0)
    return GkeBudget(
        stack=stack,
        chip=str(run.outputs["chip"]),
        model=str(run.outputs["model"]),
        provisioning=provisioning,
        replicas=replicas,
        hourly_usd=float(run.outputs["hourly_cost_usd"]),
        max_run_hours=max_run / 3600 if max_run else None,
        max_run_usd=float(max_run_usd) if max_run_usd is not None else None,
        zones=len(rule["location"]["zones"]),
        cluster_s=float(parse_duration(gke.CLUSTER_TIMEOUT)) if creates_cluster else 0.0,
        node_pool_s=float(parse_duration(gke.NODE_POOL_TIMEOUT)) if creates_cluster else 0.0,
        crd_wait_s=float(_one(run, DYNAMIC, "vllm-crds")["timeout_seconds"]),
        load_balancer_awaited=_awaited(_one(run, "kubernetes:core/v1:Service", "vllm-service")),
        capacity_wait_s=capacity_wait,
        readiness_s=_readiness_seconds(run),
        turn_extra_s=turn_extra,
        answers_s=answers,
        job_margin_s=float(k8s_workload.AWAIT_MARGIN_SECONDS),
        lead_s=float(lead),
        scrape_s=_pod_monitoring_interval(run),
    )


def _pod_monitoring_interval(run: ProgramRun) -> float:
    found = [r for r in run.resources if r.type.endswith(":PodMonitoring")]
    return (
        float(parse_duration(found[0].inputs["spec"]["endpoints"][0]["interval"])) if found else 0.0
    )


def _agent_interval(run: ProgramRun) -> float:
    found = [r for r in run.resources if r.type == COMMAND and r.name == "vllm-metrics-agent"]
    if not found:
        return 0.0
    match = re.search(r"scrape_interval: (\w+)", str(found[0].inputs["create"]))
    return float(parse_duration(match.group(1))) if match else 0.0


def _awaited(manifest: Mapping[str, Any]) -> bool:
    """pulumi-kubernetes skips its await only for `pulumi.com/skipAwait: "true"`."""
    annotations = manifest.get("metadata", {}).get("annotations") or {}
    return annotations.get("pulumi.com/skipAwait") != "true"


def _readiness_seconds(run: ProgramRun) -> float:
    """failureThreshold x periodSeconds = vllm.readinessTimeout."""
    deployment = _one(run, "kubernetes:apps/v1:Deployment", "vllm-deployment")
    [server] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    probe = server["startupProbe"]
    return float(probe["failureThreshold"]) * float(probe["periodSeconds"])


def budget(stack: str, changes: Mapping[str, Any] | None = None) -> Budget:
    run = _run(stack, changes)
    qr = _one(run, DYNAMIC, "tpu-qr")
    host_key = _one(run, DYNAMIC, "node-host-key")
    fetch = _one(run, COMMAND, "secrets-fetch")
    ready = _one(run, COMMAND, "vllm-ready")
    connection = _unsecret(fetch["connection"])
    timing = Timing.from_props(qr.get("timing"))
    max_run = qr.get("max_run_seconds")
    max_run_usd = run.outputs.get("max_run_cost_usd")  # absent without a bound
    return Budget(
        stack=stack,
        chip=str(run.outputs["chip"]),
        model=str(run.outputs["model"]),
        provisioning=str(qr["provisioning"]),
        hourly_usd=float(run.outputs["hourly_cost_usd"]),
        max_run_hours=float(max_run) / 3600 if max_run else None,
        max_run_usd=float(max_run_usd) if max_run_usd is not None else None,
        zones=len(qr["zones"]),
        capacity_wait_s=float(qr["capacity_wait_seconds"]),
        provisioning_s=timing.provisioning_timeout_seconds,
        zone_delete_s=timing.delete_timeout_seconds,
        host_key_s=float(host_key["timeout_seconds"]),
        dial_limit=int(connection["dialErrorLimit"]),
        dial_timeout_s=float(connection["perDialTimeout"]),
        secrets_s=_script_number(str(fetch["create"]), r"deadline_seconds=(\d+)"),
        readiness_s=_script_number(str(ready["create"]), r"--timeout (\d+)"),
        answers_s=_answers_seconds(str(ready["create"])),
        lead_s=float(qr.get("renewal_lead_seconds") or 0),
        drain_s=float(qr.get("drain_seconds") or 0),
        scrape_s=_agent_interval(run),
    )


def duration(seconds: float) -> str:
    """`1 h 53 min 20 s`, `30 min`, `40 s`: whole units only."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    parts.append(f"{secs} s" if secs or not total else "")
    return " ".join(p for p in parts if p)


_usd = usd


def typical_start(chip: str, model: str) -> str:
    """The measured start-up of this chip and model, cold and warm, else "not measured"."""
    measured = catalog.MEASURED_START_SECONDS.get((chip, model))
    if measured is None:
        return "not measured"
    cold, warm = measured
    return f"{round(cold / 60)} min cold, {round(warm / 60)} min warm"


def summary_table(stacks: list[str]) -> str:
    """The README's first-screen table."""
    lines = [
        "| stack | TPU | per hour | one run, at most | a day kept alive, at most (TPU) "
        "| server start, typical | `pulumi up`, worst case |",
        "|---|---|---|---|---|---|---|",
    ]
    for stack in stacks:
        figures: Budget | GkeBudget
        if is_gke(stack):
            figures = gke_budget(stack)
            tpu = f"GKE, {figures.replicas} x `{figures.chip}`"
            keep = "node recycling"
        else:
            figures = budget(stack)
            tpu, keep = f"`{figures.chip}`", "renewal"
        hourly, day, worst = figures.hourly_usd, figures.day_usd, figures.worst_case_s
        hours, usd_ = figures.max_run_hours, figures.max_run_usd
        one = _usd(usd_) if usd_ is not None else "no bound"
        run = f" ({hours:g} h)" if hours else ""
        start = typical_start(figures.chip, figures.model)
        lines.append(
            f"| `{stack}` | {tpu} | {_usd(hourly)} | {one}{run} | {_usd(day)} ({keep}) "
            f"| {start} | {duration(worst)} |"
        )
    return "\n".join(lines) + "\n"


def render_table(stacks: list[str]) -> str:
    """docs/operations.md's "Costs and waits" tables: a column per stack, VM stacks first."""
    vm = [s for s in stacks if not is_gke(s)]
    on_gke = [s for s in stacks if is_gke(s)]
    tables = [_vm_table(vm)] if vm else []
    if on_gke:
        tables.append(_gke_table(on_gke))
    return "\n".join(tables)


def _columns(names: list[str], rows: list[tuple[str, list[str]]]) -> str:
    lines = [
        "| | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines) + "\n"


def _max_run(usd: float | None, hours: float | None, note: str = "") -> str:
    if usd is None or hours is None:
        return "no bound: bills until `pulumi destroy`"
    return f"{_usd(usd)} ({hours:g} h `maxRunDuration`{note})"


def _overlap(b: Budget) -> str:
    if b.overlap_usd is None or b.overlap_tight_usd is None:
        return "none: no run end to renew ahead of"
    return (
        f"{_usd(b.overlap_usd)} ({duration(b.lead_s)} + {duration(b.drain_s)}); tighter: "
        f"{_usd(b.overlap_tight_usd)} ({duration(b.lead_s)})"
    )


def _gke_table(stacks: list[str]) -> str:
    budgets = [gke_budget(s) for s in stacks]
    rows: list[tuple[str, list[str]]] = [
        (
            "backend gke: TPU x replicas, provisioning",
            [f"`{b.chip}` x {b.replicas}, {b.provisioning}" for b in budgets],
        ),
        (
            "price per hour (`hourly_cost_usd`)",
            [
                f"{_usd(b.hourly_usd)} ({b.replicas} x {_usd(b.hourly_usd / b.replicas)})"
                for b in budgets
            ],
        ),
        (
            "the most one run of every node can cost (`max_run_cost_usd`)",
            [
                _max_run(b.max_run_usd, b.max_run_hours, "; GKE then replaces the node")
                for b in budgets
            ],
        ),
        (
            "node recycling: a replacement sought ahead of each node's end (`renewal.lead`), "
            "billed beside it at most that long",
            [
                f"{duration(b.lead_s)} per node and run, at most {_usd(b.overlap_usd)} each"
                if b.lead_s
                else "none: no run end"
                for b in budgets
            ],
        ),
        ("zones the TPU nodes may use (`tpu.zones`)", [str(b.zones) for b in budgets]),
        (
            "creating the cluster (none with `gke.cluster`)",
            [duration(b.cluster_s) for b in budgets],
        ),
        (
            "creating the system node pool (none with `gke.cluster`)",
            [duration(b.node_pool_s) for b in budgets],
        ),
        (
            "the ComputeClass and SecretProviderClass CRDs served (beside the node pool; GKE: "
            "up to an hour on a new cluster), at most",
            [duration(b.crd_wait_s) for b in budgets],
        ),
        (
            "the load balancer (GKE builds it during the wait below)",
            ["awaited" if b.load_balancer_awaited else "not awaited" for b in budgets],
        ),
        ("a first TPU node (`tpu.capacityWait`)", [duration(b.capacity_wait_s) for b in budgets]),
        (
            "each replica in turn, as an update replaces them one at a time: the old pod's stop, "
            "the image pull, the cache restore, then readiness (`vllm.readinessTimeout`)",
            [
                f"{b.replicas} x ({duration(b.turn_extra_s)} + {duration(b.readiness_s)})"
                for b in budgets
            ],
        ),
        (
            "the model's answers to the readiness Job (a chat, a tool call), at most",
            [duration(b.answers_s) for b in budgets],
        ),
        ("readiness Job: scheduling, image pull", [duration(b.job_margin_s) for b in budgets]),
        ("**worst case `pulumi up` blocks**", [f"**{duration(b.worst_case_s)}**" for b in budgets]),
        (
            "a rollout's spare TPU node (`maxSurge: 1`: an image upgrade or any pod template "
            "change), billed beside the replicas while the rollout goes well, at most",
            [f"{_usd(b.spare_usd)} ({duration(b.turns_s)})" for b in budgets],
        ),
        _metrics_row(budgets),
    ]
    return _columns([b.stack for b in budgets], rows)


def _answers_seconds(script: str) -> float:
    # The tool call is asked only with `--tool-call`.
    questions = 2 if re.search(r"(^|\s)--tool-call(\s|$)", script) else 1
    return questions * _script_number(script, r"--answer-timeout (\d+)")


def _vm_table(stacks: list[str]) -> str:
    budgets = [budget(s) for s in stacks]
    rows: list[tuple[str, list[str]]] = [
        ("TPU, provisioning", [f"`{b.chip}`, {b.provisioning}" for b in budgets]),
        ("price per hour (`hourly_cost_usd`)", [_usd(b.hourly_usd) for b in budgets]),
        (
            "the most one run can cost (`max_run_cost_usd`)",
            [_max_run(b.max_run_usd, b.max_run_hours) for b in budgets],
        ),
        (
            "a renewal's overlap, billed twice: at most `renewal.lead` + `renewal.drain` (a "
            "loose bound; tighter: `renewal.lead`, as the drain ends by the old run's end)",
            [_overlap(b) for b in budgets],
        ),
        ("zones tried (`tpu.zones`)", [str(b.zones) for b in budgets]),
        (
            "capacity wait per zone (`tpu.capacityWait`)",
            [duration(b.capacity_wait_s) for b in budgets],
        ),
        ("provisioning bound per zone", [duration(b.provisioning_s) for b in budgets]),
        (
            "deleting a refused zone's request, at most",
            [duration(b.zone_delete_s) for b in budgets],
        ),
        ("SSH host key (guest attributes)", [duration(b.host_key_s) for b in budgets]),
        (
            "first SSH connection, every dial timing out",
            [
                f"{b.dial_limit + 1} dials x {b.dial_timeout_s:g} s + backoff = {duration(b.ssh_s)}"
                for b in budgets
            ],
        ),
        ("secret fetch (IAM propagation)", [duration(b.secrets_s) for b in budgets]),
        ("readiness (`vllm.readinessTimeout`)", [duration(b.readiness_s) for b in budgets]),
        (
            "the model's answers to readiness (a chat, a tool call), at most",
            [duration(b.answers_s) for b in budgets],
        ),
        ("**worst case `pulumi up` blocks**", [f"**{duration(b.worst_case_s)}**" for b in budgets]),
        _metrics_row(budgets),
    ]
    return _columns([b.stack for b in budgets], rows)


def all_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
BEGIN = "<!-- budget: generated by `.venv/bin/python -m scripts.budget --update-readme` -->\n"
END = "<!-- budget: end -->\n"
SUMMARY_BEGIN = (
    "<!-- summary: generated by `.venv/bin/python -m scripts.budget --update-readme` -->\n"
)
SUMMARY_END = "<!-- summary: end -->\n"


def generated(text: str, begin: str = BEGIN, end: str = END) -> str:
    start = text.index(begin) + len(begin)
    return text[start : text.index(end, start)]


def _replace(path: Path, begin: str, end: str, table: str) -> None:
    text = path.read_text()
    path.write_text(text.replace(begin + generated(text, begin, end) + end, begin + table + end))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.budget",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("stacks", nargs="*", help="stack names (default: every stack file)")
    parser.add_argument(
        "--update-readme",
        action="store_true",
        help="rewrite the generated tables (for every stack): the README's first-screen summary "
        "and docs/operations.md's costs and waits, instead of printing them",
    )
    args = parser.parse_args(argv)
    if args.update_readme:
        stacks = all_stacks()
        _replace(README, SUMMARY_BEGIN, SUMMARY_END, summary_table(stacks))
        _replace(OPERATIONS, BEGIN, END, render_table(stacks))
        return 0
    chosen = args.stacks or all_stacks()
    sys.stdout.write(summary_table(chosen) + "\n" + render_table(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
