"""Components built on their own, from the settings sections they read (issue 33 item 1).

A component whose Args carry the whole StackConfig can read anything, so a test must build the
whole program to know what it does. The narrowed ones take only their sections and other
components' outputs; they are built here alone, under mocks, in a program of a few lines.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from components.compile_cache import CompileCacheArgs
from components.config import StackConfig
from components.dns import EndpointNameArgs
from components.gke.k8s_workload import GkeWorkloadArgs
from components.monitoring import StackMonitoringArgs
from components.secrets import NodeSecretsArgs
from scripts.program_runner import run_file

#: Args that take only what they read (the rest still carry the config, for now).
NARROWED = [NodeSecretsArgs, CompileCacheArgs, StackMonitoringArgs, EndpointNameArgs]


@pytest.mark.parametrize("args", NARROWED, ids=lambda a: a.__name__)
def test_narrowed_args_carry_no_stack_config(args: type) -> None:
    types = {f.name: str(f.type) for f in dataclasses.fields(args)}
    assert not [n for n, t in types.items() if StackConfig.__name__ in t], types


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
