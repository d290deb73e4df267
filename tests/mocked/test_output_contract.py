"""The stack outputs are a contract with other services: names, types, secrecy and presence.

The Pulumi engine drops an output whose value is None (pulumi/runtime/rpc.py
`serialize_properties`), and the mocked runner replays that (`engine_output_names`), so an
output that would be None in some situation is *missing* here, exactly as `pulumi stack output`
and `require_output` would find it. Each output is therefore either always present, with a
documented empty value when it does not apply, or documented as optional.

The contract itself is in tests/support/output_contract.py, shared with the engine stack tests. To
add an output: add it to `CONTRACT` there (and to docs/outputs.md "The contract"); if it can lack
a value, give it an `empty` value or mark it `optional`, say in `expected` which config
empties it (or in `BACKEND_EMPTY`/`BACKEND_ABSENT` which backend), and add a situation to
`SITUATIONS` here that produces that.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import mocks

from components.config.loader import StackConfig
from scripts.program_runner import ProgramRun, run_file, stack_file_config, with_changes
from tests.support import mock_outputs
from tests.support.docs import read_doc, section
from tests.support.mock_outputs import cloud_outputs
from tests.support.output_contract import (
    BACKEND_ABSENT,
    CONTRACT,
    OPTIONAL,
    config_of,
    expected,
    problems,
)
from tests.support.pulumi_program import ROOT, run_program

NewResource = Callable[[mocks.MockResourceArgs], dict[str, Any]]
QR = "pulumi-python:dynamic:Resource"


def cloud_answers(
    **overrides: Callable[[mocks.MockResourceArgs], dict[str, Any] | None],
) -> NewResource:
    """`cloud_outputs`, with some resources' answers changed: {kind: args -> changed fields}."""

    def outputs_for(args: mocks.MockResourceArgs) -> dict[str, Any]:
        state = cloud_outputs(args)
        for change in overrides.values():
            state.update(change(args) or {})
        return state

    return outputs_for


def _qr(**fields: Any) -> Callable[[mocks.MockResourceArgs], dict[str, Any] | None]:
    return lambda args: fields if args.typ == QR and "qr_id" in args.inputs else None


def _host_key(value: str | None) -> Callable[[mocks.MockResourceArgs], dict[str, Any] | None]:
    return lambda args: (
        {"host_key": value} if args.typ == QR and "node_create_time" in args.inputs else None
    )


def _ready(stdout: str) -> Callable[[mocks.MockResourceArgs], dict[str, Any] | None]:
    return lambda args: (
        {"stdout": stdout}
        if args.typ == "command:remote:Command" and args.name.endswith("-ready")
        else None
    )


MONITORING_OFF = {"tpu-vllm:monitoring.enabled": False}
UPTIME_ON = {"tpu-vllm:monitoring.uptimeCheck": True}


@dataclass(frozen=True)
class Situation:
    """A state of the world a stack can be in, and what the contract says about it."""

    stack: str
    changes: Mapping[str, Any]
    outputs_for: NewResource
    #: Outputs that must hold their documented empty value in this state of the world, beyond
    #: what the config explains (tests/support/output_contract.py `expected`).
    empty: frozenset[str] = frozenset()
    #: Optional outputs that must be absent in this state of the world, beyond the config's.
    absent: frozenset[str] = frozenset()

    @property
    def config(self) -> StackConfig:
        raw = with_changes(stack_file_config(self.stack), self.changes)
        return config_of(raw, stack=self.stack)

    @property
    def all_empty(self) -> frozenset[str]:
        return self.empty | expected(self.config).empty

    @property
    def all_absent(self) -> frozenset[str]:
        return self.absent | expected(self.config).absent


SPOT = {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
SITUATIONS: dict[str, Situation] = {
    "v5e1": Situation("v5e1", {}, cloud_outputs),
    "v6e4": Situation("v6e4", {}, cloud_outputs),
    # No run end: the config explains the empty expiry and the absent bounds.
    "spot": Situation("v5e1", SPOT, cloud_answers(qr=_qr(termination_time=None))),
    # A flex-start run ended and `pulumi refresh` read the SUSPENDED request: no node, no IPs.
    "expired": Situation(
        "v5e1",
        {},
        cloud_answers(qr=_qr(external_ip=None, internal_ip=None, state="SUSPENDED")),
        empty=frozenset(
            {"external_ip", "internal_ip", "endpoint", "endpoint_ip", "openai_base_url"}
        ),
    ),
    "cache-off": Situation("v5e1", {"tpu-vllm:cache.enabled": False}, cloud_outputs),
    "unverified-host-key": Situation(
        "v5e1",
        {"tpu-vllm:access.allowUnverifiedHostKey": True},
        cloud_answers(key=_host_key(None)),
        empty=frozenset({"ssh_host_key"}),
    ),
    # vLLM printed no `Memory statistics` line (another model or image version); a result line
    # written before readiness asked the model has no first answer.
    "no-memory-line": Situation(
        "v5e1",
        {},
        cloud_answers(ready=_ready('TPU_VLLM_READY {"hbm": null, "startup_seconds": 801.5}\n')),
        empty=frozenset({"hbm"}),
        absent=frozenset({"first_answer_seconds"}),
    ),
    # The readiness command's stdout holds no result line (a state written by an older version).
    "no-ready-result": Situation(
        "v5e1",
        {},
        cloud_answers(ready=_ready("[  857s] ready: Application startup complete.\n")),
        empty=frozenset({"hbm"}),
        absent=frozenset({"startup_seconds", "first_answer_seconds"}),
    ),
    # N replicas behind one reserved address: what names one VM is empty (docs/outputs.md).
    "gke": Situation("v6e4-gke", {}, cloud_outputs),
    # GKE with a DNS name: `endpoint` names it, `endpoint_ip` the reserved address.
    "gke-dns": Situation(
        "v6e4-gke", {"tpu-vllm:dns.managedZone": mock_outputs.MANAGED_ZONE}, cloud_outputs
    ),
    # GKE on spot nodes: no run limit, so no most-a-run-can-cost.
    "gke-spot": Situation("v6e4-gke", SPOT, cloud_outputs),
    # Monitoring off: no dashboard, and on the VM no log leaves the node.
    "monitoring-off": Situation("v5e1", MONITORING_OFF, cloud_outputs),
    "uptime-check": Situation("v5e1", UPTIME_ON, cloud_outputs),
    # GKE's logging agent ships container logs whatever the stack says.
    "gke-monitoring-off": Situation("v6e4-gke", MONITORING_OFF, cloud_outputs),
    "gke-uptime-check": Situation("v6e4-gke", UPTIME_ON, cloud_outputs),
    "gke-cache-off": Situation("v6e4-gke", {"tpu-vllm:cache.enabled": False}, cloud_outputs),
}


def run_situation(situation: Situation) -> ProgramRun:
    return run_program(situation.stack, situation.changes, outputs_for=situation.outputs_for)


@pytest.mark.parametrize("name", list(SITUATIONS))
def test_every_required_output_is_present_typed_and_never_none(name: str) -> None:
    situation = SITUATIONS[name]
    run = run_situation(situation)
    found = problems(
        run.outputs,
        config=situation.config,
        secret=set(run.secret_outputs),
        world_empty=situation.empty,
        world_absent=situation.absent,
    )
    assert not found, f"situation {name}: " + "; ".join(found)


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_output_values_have_their_documented_shapes(stack: str) -> None:
    run = run_program(stack)
    assert re.fullmatch(r"http://[0-9.]+:8000", run.outputs["endpoint"])
    assert run.outputs["openai_base_url"] == run.outputs["endpoint"] + "/v1"
    assert set(run.outputs["hbm"]) == {"total_gib", "usable_gib", "used_gib", "available_gib"}
    assert run.outputs["api_key_secret"].startswith("projects/")
    assert run.outputs["expires_at"] == mock_outputs.EXPIRES_AT
    assert run.outputs["startup_seconds"] > 0
    assert re.fullmatch(r"gs://[a-z0-9-]+/xla-cache/[0-9a-f]{16}/", run.outputs["compile_cache"])
    restored = run.outputs["cache_restored"]
    assert set(restored) == {"restored", "files", "bytes", "seconds", "generation", "reason"}
    assert restored["generation"].startswith(run.outputs["compile_cache"])
    assert run.outputs["replicas"] == 1
    assert run.outputs["renew_command"] == f".venv/bin/python -m scripts.renew {stack}"


def test_gke_output_values_have_their_documented_shapes() -> None:
    """One reserved address for N replicas, the cluster's path, the same cache prefix."""
    run = run_program("v6e4-gke")
    address = f"http://{mock_outputs.LB_ADDRESS}:8000"
    assert run.outputs["endpoint"] == run.outputs["endpoint_ip"] == address
    assert run.outputs["openai_base_url"] == address + "/v1"
    assert run.outputs["external_ip"] == mock_outputs.LB_ADDRESS
    assert run.outputs["replicas"] == 2
    assert re.fullmatch(
        r"projects/[^/]+/locations/us-east5/clusters/[a-z0-9-]+", run.outputs["cluster"]
    )
    assert run.outputs["hourly_cost_usd"] == 2 * run_program("v6e4").outputs["hourly_cost_usd"]
    assert re.fullmatch(r"gs://[a-z0-9-]+/xla-cache/[0-9a-f]{16}/", run.outputs["compile_cache"])
    restored = run.outputs["cache_restored"]
    assert set(restored) == {"restored", "files", "bytes", "seconds", "generation", "reason"}
    assert restored["restored"] is False  # per replica: each pod's init container logs it
    assert "xla-cache-restore" in restored["reason"]


def test_gke_expiry_and_renewal_outputs_keep_their_meaning_under_node_recycling() -> None:
    """`expires_at` is when the endpoint stops answering unless `renew_command` runs; on GKE no
    such moment exists, because the stack's ComputeClass has GKE seek each flex-start node's
    replacement `renewal.lead` before its end: both are "" there, and `replicas` is the number
    of serving pods, which the PodDisruptionBudget keeps from all moving at once. `pulumi up`
    says so in words."""
    run = run_program("v6e4-gke")
    assert run.outputs["expires_at"] == "" and run.outputs["renew_command"] == ""
    [node_class] = [r for r in run.resources if r.type.endswith(":ComputeClass")]
    [rule] = node_class.inputs["spec"]["priorities"]
    assert rule["flexStart"]["nodeRecycling"]["leadTimeSeconds"] == 3600
    [deployment] = [r for r in run.resources if r.type == "kubernetes:apps/v1:Deployment"]
    assert run.outputs["replicas"] == deployment.inputs["spec"]["replicas"] == 2
    [budget] = [r for r in run.resources if r.type.endswith(":PodDisruptionBudget")]
    assert budget.inputs["spec"]["minAvailable"] < run.outputs["replicas"]
    notice = [m for _, m in run.log if "renew_command is empty on backend gke" in m]
    assert notice and "replacement 60 minutes before" in notice[0]
    # On the VM backend they keep theirs: the run's end, and the command that renews it.
    vm = run_program("v5e1")
    assert vm.outputs["expires_at"] and vm.outputs["renew_command"].endswith("renew v5e1")
    assert vm.outputs["replicas"] == 1


def test_gke_endpoint_uses_the_dns_name_and_endpoint_ip_the_address() -> None:
    run = run_situation(SITUATIONS["gke-dns"])
    assert run.outputs["endpoint"] == f"http://v6e4-gke.{mock_outputs.ZONE_DNS_NAME[:-1]}:8000"
    assert run.outputs["endpoint_ip"] == f"http://{mock_outputs.LB_ADDRESS}:8000"
    [record] = [r for r in run.resources if r.type == "gcp:dns/recordSet:RecordSet"]
    assert record.inputs["rrdatas"] == [mock_outputs.LB_ADDRESS]


def test_the_runner_drops_none_outputs_as_the_engine_does(tmp_path: Path) -> None:
    """The model the contract tests rely on: None is dropped, "" / {} / 0 / unknown are kept."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\n"
        "pulumi.export('none', None)\n"
        "pulumi.export('none_output', pulumi.Output.from_input(None))\n"
        "pulumi.export('empty', '')\n"
        "pulumi.export('empty_object', {})\n"
        "pulumi.export('zero', 0)\n"
        "pulumi.export('nested_none', {'a': None})\n"
    )
    run = run_file(program, "dev", {}, project_name="probe")
    assert run.error is None
    assert set(run.outputs) == {"empty", "empty_object", "zero", "nested_none"}


def _readme_outputs() -> dict[str, tuple[str, str]]:
    """docs/outputs.md's table (the one table of the contract): name -> (type, meaning)."""
    table = section(read_doc("outputs"), "The contract")
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (.+) \|$", table, re.MULTILINE)
    return {name: (kind.strip(), meaning.strip()) for name, kind, meaning in rows}


def test_readme_outputs_table_matches_the_contract() -> None:
    table = _readme_outputs()
    assert set(table) == set(CONTRACT), "docs/outputs.md table and CONTRACT differ"
    for name, out in CONTRACT.items():
        kind, meaning = table[name]
        assert "null" not in kind + meaning, f"{name}: outputs are never null"
        assert ("optional" in kind) == out.optional, f"{name}: say optional iff it is"
        assert ("**secret**" in kind) == out.secret, name
        if out.empty == "":
            assert '`""`' in meaning, f'{name}: docs/outputs.md must name its empty value ""'
        elif out.empty == {}:
            assert "`{}`" in meaning, f"{name}: docs/outputs.md must name its empty value {{}}"


CONSUMER = ROOT / "examples" / "consumer" / "__main__.py"


def test_consumer_reads_required_outputs_with_require_and_optional_ones_with_get() -> None:
    """`require_output` on an optional output would fail the consumer's preview when absent."""
    read: dict[str, set[str]] = {"require_output": set(), "get_output": set()}
    for path in (ROOT / "examples").rglob("*.py"):
        text = path.read_text()
        for how, name in re.findall(r"(require_output|get_output)\(\s*[\"'](\w+)[\"']", text):
            assert name in CONTRACT, f"{path} reads {name}, which is not a stack output"
            read[how].add(name)
    assert not read["require_output"] & OPTIONAL, "read optional outputs with get_output"
    assert {"openai_base_url", "model", "api_key"} <= read["require_output"]
    assert read["get_output"], "the example shows how to read an optional output"


@pytest.mark.parametrize("name", list(SITUATIONS))
def test_consumer_example_runs_against_what_the_engine_stores(name: str) -> None:
    """The consumer program, under mocks, against the outputs the server stack really keeps."""
    server = run_situation(SITUATIONS[name])

    def stack_reference(args: mocks.MockResourceArgs) -> dict[str, Any]:
        if args.typ != "pulumi:pulumi:StackReference":
            return {}
        return {"outputs": server.outputs, "secretOutputNames": sorted(server.secret_outputs)}

    run = run_file(
        CONSUMER,
        "dev",
        {"tpu-vllm-consumer:serverStack": "my-org/tpu-vllm/v5e1"},
        project_name="tpu-vllm-consumer",
        outputs_for=stack_reference,
    )
    assert run.error is None, run.error
    assert run.outputs["llm_base_url"] == server.outputs["openai_base_url"]
    assert "llm_api_key" in run.secret_outputs
    # GKE has a run limit per node but no end: it replaces each ended node, so it bills on.
    if "max_run_cost_usd" in server.outputs and server.outputs["expires_at"]:
        assert run.outputs["llm_budget"].startswith("ends 2026-")
    else:
        assert run.outputs["llm_budget"].startswith("no end")


# Resources each stack registers, under mocks that only echo inputs.
RESOURCE_COUNTS = {
    # 21, plus the compile cache's component, bucket, grant; monitoring: the node's two
    # writer grants, the metrics agent's command, the StackMonitoring component, its dashboard;
    # the image pin
    "v5e1": 30,
    "v6e4": 30,
    # no TPU node pool; the ComputeClass, the PodDisruptionBudget, the CRD wait, the readiness
    # Job's rollout Role and binding, the pods' owner; monitoring: the PodMonitoring, the
    # StackMonitoring component, its dashboard; the image pin (and no pod-reader Role/binding);
    # the pods' admission check and the readiness Job's watch
    "v6e4-gke": 37,
}


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("stack", list(RESOURCE_COUNTS))
def test_program_runs_under_mocks_that_only_echo_inputs(stack: str, preview: bool) -> None:
    """Mocks that know no cloud outputs (or a preview, where they are unknown) must not crash
    the program: every value computed from an output tolerates its absence."""
    run = run_program(stack, preview=preview, outputs_for=None)
    assert len(run.resources) == RESOURCE_COUNTS[stack]
    assert run.outputs["model"] in ("google/gemma-4-E2B-it", "google/gemma-4-31B-it")
    if preview:  # unknown values are kept by the engine, so every output shows in a preview
        backend = "gke" if stack.endswith("-gke") else "vm"  # but a None known at preview not
        assert set(run.outputs) == set(CONTRACT) - BACKEND_ABSENT[backend]
