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
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic as dyn
import pytest

import components
from components.config import StackConfig
from components.gke.k8s_workload import GkeWorkloadArgs
from scripts.program_runner import run_file

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
    """One constructor style: `Resource(name, Args(...), opts)`, Args a dataclass."""
    params = list(inspect.signature(init_of(resource)).parameters.values())[1:]
    kinds = {p.kind for p in params}
    assert inspect.Parameter.KEYWORD_ONLY not in kinds, params
    names = [p.name for p in params]
    if resource.__qualname__ in NO_INPUTS:
        assert names == ["name", "opts"]
        return
    assert names == ["name", "args", "opts"], names
    assert dataclasses.is_dataclass(args_type(resource))


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


def test_node_secrets_alone(tmp_path: Path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\n"
        "from components.config import AccessSettings\n"
        "from components.secrets import NodeSecrets, NodeSecretsArgs\n"
        "access = AccessSettings(('10.0.0.0/8',), False, (), 'hf-token', False)\n"
        "secrets = NodeSecrets('secrets', NodeSecretsArgs('my-project', 'v5e1', access,\n"
        "    'sa@my-project.iam.gserviceaccount.com'))\n"
        "pulumi.export('api_key_secret', secrets.api_key_secret)\n"
    )
    run = run_file(program, "v5e1", {})
    assert run.error is None, run.error
    by_name = {r.name: r for r in run.resources}
    hf = by_name["secrets-hf-token-access"].inputs
    assert hf["secretId"] == "hf-token" and hf["project"] == "my-project"
    assert hf["member"] == "serviceAccount:sa@my-project.iam.gserviceaccount.com"
    key = by_name["secrets-api-key-secret"].inputs
    assert key["secretId"] == "tpu-vllm-v5e1-api-key"
    assert key["labels"]["stack"] == "v5e1"


def test_compile_cache_alone(tmp_path: Path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\n"
        "from components.compile_cache import CompileCache, CompileCacheArgs\n"
        "cache = CompileCache('cache', CompileCacheArgs('my-project', 'v5e1', 'my-bucket',\n"
        "    'gs://my-bucket/xla-cache/KEY/', True, 'US-WEST4', 'sa@x'))\n"
        "pulumi.export('prefix', cache.prefix)\n"
    )
    run = run_file(program, "v5e1", {})
    assert run.error is None, run.error
    by_name = {r.name: r for r in run.resources}
    bucket = by_name["cache-bucket"].inputs
    assert (bucket["name"], bucket["location"], bucket["project"]) == (
        "my-bucket",
        "US-WEST4",
        "my-project",
    )
    assert by_name["cache-node-writer"].inputs["member"] == "serviceAccount:sa@x"
    assert run.outputs["prefix"] == "gs://my-bucket/xla-cache/KEY/"


def test_flex_start_tpu_alone(tmp_path: Path) -> None:
    """The node from its sections alone: no model, no vLLM flags, no GKE, no DNS."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\n"
        "from components.config import AccessSettings, MonitoringSettings, RenewalSettings\n"
        "from components import catalog\n"
        "from components.config import TpuSettings\n"
        "from components.vm.tpu import FlexStartTpu, FlexStartTpuArgs\n"
        "tpu = TpuSettings(catalog.CHIPS['v5e-1'], ('us-west4-a',), 'flex-start', 14400,\n"
        "    'v2-alpha-tpuv5-lite', 3600)\n"
        "access = AccessSettings(('10.0.0.0/8',), False, ('10.1.0.0/16',), 'hf-token', False)\n"
        "node = FlexStartTpu('tpu', FlexStartTpuArgs('my-project', 'v5e1', tpu, access,\n"
        "    RenewalSettings(), MonitoringSettings(), 8000, 'r/vllm@sha256:' + 'a' * 64))\n"
        "pulumi.export('zone', node.zone)\n"
    )
    run = run_file(program, "v5e1", {})
    assert run.error is None, run.error
    by_name = {r.name: r for r in run.resources}
    qr = by_name["tpu-qr"].inputs
    assert (qr["project"], qr["zones"], qr["accelerator_type"]) == (
        "my-project",
        ["us-west4-a"],
        "v5litepod-1",
    )
    assert qr["image"] == "r/vllm@sha256:" + "a" * 64
    assert by_name["tpu-serving"].inputs["sourceRanges"] == ["10.0.0.0/8"]
    assert by_name["tpu-ssh"].inputs["sourceRanges"] == ["10.1.0.0/16"]
