"""Components built on their own, from the settings sections they read.

A component whose Args carry the whole StackConfig can read anything, so a test must build the
whole program to know what it does. The narrowed ones take only their sections and other
components' outputs; they are built here alone, under mocks, in a program of a few lines.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic as dyn
import pytest

import components
from components import catalog
from components.compile_cache import CompileCache, CompileCacheArgs
from components.config import (
    AccessSettings,
    DnsSettings,
    GkeSettings,
    ModelSettings,
    MonitoringSettings,
    RenewalSettings,
    StackConfig,
    TpuSettings,
)
from components.dns import EndpointName, EndpointNameArgs, ManagedZone
from components.gke.cluster import GkeTpuCluster, GkeTpuClusterArgs
from components.gke.k8s_workload import GkeWorkloadArgs
from components.gke.preflight import Preflight
from components.monitoring import StackMonitoring, StackMonitoringArgs
from components.secrets import NodeSecrets, NodeSecretsArgs
from components.vllm_metrics import queries_for
from components.vm.queued_resource_spec import node_ids
from components.vm.tpu import FlexStartTpu, FlexStartTpuArgs
from scripts.program_runner import ProgramRun, run_function

#: Resources that take no inputs at all: (name, opts).
NO_INPUTS = {"SshIdentity"}


def our_resources() -> list[type]:
    """Every component and dynamic resource class the program defines."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(components.__path__, "components."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and value.__module__ == info.name
                and issubclass(value, (pulumi.ComponentResource, dyn.Resource))
            ):
                found[value.__qualname__] = value
    return sorted(found.values(), key=lambda c: c.__qualname__)


def init_of(resource: type) -> Any:
    return vars(resource)["__init__"]


def args_type(resource: type) -> type:
    """The class named by `__init__`'s `args` annotation, found in its module."""
    annotation = init_of(resource).__annotations__["args"]
    module = sys.modules[resource.__module__]
    found = eval(annotation, vars(module)) if isinstance(annotation, str) else annotation  # noqa: S307
    assert isinstance(found, type)
    return found


def carries_stack_config(args: type) -> list[str]:
    """Fields whose annotation names StackConfig, however it is spelled."""
    return [f.name for f in dataclasses.fields(args) if StackConfig.__name__ in str(f.type)]


def test_the_program_defines_the_resources_it_is_known_to() -> None:
    names = {r.__qualname__ for r in our_resources()}
    assert {"FlexStartTpu", "VllmServer", "GkeWorkload", "QueuedResource", "ImagePin"} <= names


@pytest.mark.parametrize("resource", our_resources(), ids=lambda r: r.__qualname__)
def test_every_resource_is_built_as_name_args_opts(resource: type) -> None:
    """One constructor style: `Resource(name, Args(...), opts)`, Args a dataclass whose fields
    are given by keyword, so two inputs of one type cannot be swapped unnoticed."""
    params = list(inspect.signature(init_of(resource)).parameters.values())[1:]
    kinds = {p.kind for p in params}
    assert inspect.Parameter.KEYWORD_ONLY not in kinds, params
    names = [p.name for p in params]
    if resource.__qualname__ in NO_INPUTS:
        assert names == ["name", "opts"]
        return
    assert names == ["name", "args", "opts"], names
    args = args_type(resource)
    assert dataclasses.is_dataclass(args)
    positional = [f.name for f in dataclasses.fields(args) if not f.kw_only]
    assert not positional, f"{args.__name__} takes {positional} by position: use kw_only=True"


@pytest.mark.parametrize(
    "resource",
    [r for r in our_resources() if r.__qualname__ not in NO_INPUTS],
    ids=lambda r: r.__qualname__,
)
def test_no_resource_takes_the_whole_stack_config(resource: type) -> None:
    assert not carries_stack_config(args_type(resource))


def test_the_check_finds_a_whole_config_in_args() -> None:
    @dataclasses.dataclass
    class Wide:
        config: StackConfig
        port: int

    assert carries_stack_config(Wide) == ["config"]


def test_the_gke_workload_takes_the_clusters_path_as_an_input() -> None:
    """The path comes from GkeTpuCluster's output, not derived again from the config."""
    assert "cluster" in {f.name for f in dataclasses.fields(GkeWorkloadArgs)}
    source = Path("components/gke/k8s_workload.py").read_text()
    assert "cluster_path(" not in source


ACCESS = AccessSettings(
    allowed_cidrs=("10.0.0.0/8",),
    allow_public=False,
    ssh_cidrs=("10.1.0.0/16",),
    hf_token_secret="hf-token",
    allow_unverified_host_key=False,
)
IMAGE = "r/vllm@sha256:" + "a" * 64
V5E1_TPU = TpuSettings(
    chip=catalog.CHIPS["v5e-1"],
    zones=("us-west4-a",),
    provisioning="flex-start",
    max_run_seconds=14400,
    runtime_version="v2-alpha-tpuv5-lite",
    capacity_wait_seconds=3600,
)


def alone(program: Callable[[], None]) -> ProgramRun:
    run = run_function(program, "v5e1", {})
    assert run.error is None, run.error
    return run


def test_node_secrets_alone() -> None:
    def program() -> None:
        secrets = NodeSecrets(
            "secrets",
            NodeSecretsArgs(
                project="my-project",
                stack="v5e1",
                access=ACCESS,
                service_account_email="sa@my-project.iam.gserviceaccount.com",
            ),
        )
        pulumi.export("api_key_secret", secrets.api_key_secret)

    by_name = {r.name: r for r in alone(program).resources}
    hf = by_name["secrets-hf-token-access"].inputs
    assert hf["secretId"] == "hf-token" and hf["project"] == "my-project"
    assert hf["member"] == "serviceAccount:sa@my-project.iam.gserviceaccount.com"
    key = by_name["secrets-api-key-secret"].inputs
    assert key["secretId"] == "tpu-vllm-v5e1-api-key"
    assert key["labels"]["stack"] == "v5e1"


def test_compile_cache_alone() -> None:
    def program() -> None:
        cache = CompileCache(
            "cache",
            CompileCacheArgs(
                project="my-project",
                stack="v5e1",
                bucket_name="my-bucket",
                prefix="gs://my-bucket/xla-cache/KEY/",
                create_bucket=True,
                region="US-WEST4",
                service_account_email="sa@x",
            ),
        )
        pulumi.export("prefix", cache.prefix)

    run = alone(program)
    by_name = {r.name: r for r in run.resources}
    bucket = by_name["cache-bucket"].inputs
    assert (bucket["name"], bucket["location"], bucket["project"]) == (
        "my-bucket",
        "US-WEST4",
        "my-project",
    )
    assert by_name["cache-node-writer"].inputs["member"] == "serviceAccount:sa@x"
    assert run.outputs["prefix"] == "gs://my-bucket/xla-cache/KEY/"


def test_flex_start_tpu_alone() -> None:
    """The node from its sections alone: no model, no vLLM flags, no GKE, no DNS."""

    def program() -> None:
        node = FlexStartTpu(
            "tpu",
            FlexStartTpuArgs(
                project="my-project",
                stack="v5e1",
                tpu=V5E1_TPU,
                access=ACCESS,
                renewal=RenewalSettings(),
                monitoring=MonitoringSettings(),
                port=8000,
                image=IMAGE,
            ),
        )
        pulumi.export("zone", node.zone)

    by_name = {r.name: r for r in alone(program).resources}
    qr = by_name["tpu-qr"].inputs
    assert (qr["project"], qr["zones"], qr["accelerator_type"]) == (
        "my-project",
        ["us-west4-a"],
        "v5litepod-1",
    )
    assert qr["image"] == IMAGE
    assert by_name["tpu-serving"].inputs["sourceRanges"] == ["10.0.0.0/8"]
    assert by_name["tpu-ssh"].inputs["sourceRanges"] == ["10.1.0.0/16"]


def test_endpoint_name_alone() -> None:
    """The record from the `dns` section, its zone and an address another component gives."""

    def program() -> None:
        name = EndpointName(
            "endpoint-name",
            EndpointNameArgs(
                project="my-project",
                dns=DnsSettings(managed_zone="models", name="v5e1"),
                zone=ManagedZone(
                    name="models", dns_name="models.example.com.", visibility="public"
                ),
                address="203.0.113.7",
            ),
        )
        pulumi.export("hostname", name.hostname)

    run = alone(program)
    [record] = [r for r in run.resources if r.type == "gcp:dns/recordSet:RecordSet"]
    assert record.inputs["name"] == "v5e1.models.example.com."
    assert record.inputs["managedZone"] == "models"
    assert record.inputs["rrdatas"] == ["203.0.113.7"]
    assert run.outputs["hostname"] == "v5e1.models.example.com"


def test_stack_monitoring_alone() -> None:
    """The dashboard and the uptime check from the `monitoring` section and a host."""

    def program() -> None:
        watch = StackMonitoring(
            "monitoring",
            StackMonitoringArgs(
                project="my-project",
                stack="v5e1",
                monitoring=MonitoringSettings(uptime_check=True),
                port=8000,
                backend="vm",
                queries=queries_for("v5e1"),
                host="203.0.113.7",
                tpu_nodes=node_ids("v5e1"),
            ),
        )
        pulumi.export("dashboard_url", watch.dashboard_url)

    run = alone(program)
    types = {r.type for r in run.resources}
    assert "gcp:monitoring/dashboard:Dashboard" in types
    [check] = [
        r for r in run.resources if r.type == "gcp:monitoring/uptimeCheckConfig:UptimeCheckConfig"
    ]
    assert check.inputs["monitoredResource"]["labels"]["host"] == "203.0.113.7"
    assert check.inputs["httpCheck"]["port"] == 8000
    assert "my-project" in run.outputs["dashboard_url"]


def test_gke_tpu_cluster_alone() -> None:
    """A created cluster from its sections alone: no vLLM flags, no cache, no DNS."""

    def program() -> None:
        cluster = GkeTpuCluster(
            "gke",
            GkeTpuClusterArgs(
                project="my-project",
                stack="v6e4-gke",
                gke=GkeSettings(
                    replicas=2,
                    existing_cluster="",
                    cluster_project="my-project",
                    location="us-east5-b",
                    region="us-east5",
                ),
                access=ACCESS,
                model=ModelSettings(id="google/gemma-4-31B-it", weights_gib=58.0),
                tpu=TpuSettings(
                    chip=catalog.CHIPS["v6e-4"],
                    zones=("us-east5-b",),
                    provisioning="flex-start",
                    max_run_seconds=14400,
                    runtime_version="v2-alpha-tpuv6e",
                    capacity_wait_seconds=3600,
                ),
                monitoring=MonitoringSettings(),
                checked=Preflight(found=None, managed_collection=True),
            ),
        )
        pulumi.export("cluster", cluster.cluster)

    run = alone(program)
    [created] = [r for r in run.resources if r.type == "gcp:container/cluster:Cluster"]
    assert (created.inputs["project"], created.inputs["location"]) == ("my-project", "us-east5-b")
    assert created.inputs["network"] == ACCESS.network
    assert "gemma-4-31B-it" in created.inputs["description"]
    [address] = [r for r in run.resources if r.type == "gcp:compute/address:Address"]
    assert address.inputs["region"] == "us-east5"


def node_program(
    monitoring: MonitoringSettings, uptime_ranges: tuple[str, ...]
) -> Callable[[], None]:
    def program() -> None:
        FlexStartTpu(
            "tpu",
            FlexStartTpuArgs(
                project="my-project",
                stack="v5e1",
                tpu=V5E1_TPU,
                access=ACCESS,
                renewal=RenewalSettings(),
                monitoring=monitoring,
                port=8000,
                image=IMAGE,
                uptime_ranges=uptime_ranges,
            ),
        )

    return program


def test_the_uptime_checkers_get_only_the_ranges_they_are_given() -> None:
    run = alone(node_program(MonitoringSettings(uptime_check=True), ("35.1.2.3/32",)))
    by_name = {r.name: r for r in run.resources}
    assert by_name["tpu-uptime-check"].inputs["sourceRanges"] == ["35.1.2.3/32"]


def test_an_uptime_check_without_ranges_makes_no_rule_open_to_all() -> None:
    """An ingress rule with no source ranges is open to everyone: the node refuses to make one."""
    run = run_function(node_program(MonitoringSettings(uptime_check=True), ()), "v5e1", {})
    assert run.error is not None and "uptimeCheck" in str(run.error)
    assert not [r for r in run.resources if r.name == "tpu-uptime-check"]
