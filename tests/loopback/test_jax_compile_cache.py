"""Every compile cached, proven with real JAX (jax 0.10.2, CPU): no fake cache files here.

The environment comes from what the program renders: the `-e` flags of the VM's `docker run`
(the `vllm-start` command's text) and the GKE server container's `env`. The JAX side of a start
is tests/support/jax_start.py in a fresh process, which sets the cache directory the way
tpu-inference does and counts `jax.monitoring`'s cache events (event names from jax/_src/compiler.py
and jax/_src/compilation_cache.py). The node tool is scripts/remote/xla_cache.py as the start and
save scripts run it (`fetch`, `install`, `save`) against one local bucket: the cold node through
the fake `gcloud storage` (tests/support/fakes/bin/gcloud, as on a VM with gcloud), the fresh node
through the Cloud Storage JSON API fake (tests/support/fakes/gcs_api.py, with the metadata server's
token, as on a VM without gcloud or in GKE's init container), so the two transports share one
layout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from components.jax_cache_env import MIN_COMPILE_TIME_ENV
from tests.support.fakes.gcs_api import FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.jax_nodes import CONTAINER_CACHE, JAX_START, Bucket
from tests.support.pulumi_program import ProgramRun, refused, run_program
from tests.support.remote_stack import docker_run_env, start_text

FUNCTIONS = 12
KEY = "tpu-vllm:cache.minCompileSeconds"
#: JAX's extra XLA caches (jax/_src/config.py `jax_persistent_cache_enable_xla_caches`).
XLA_CACHES_ENV = "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"
#: Whether this JAX hashes the cache directory's path into each key: before 0.11.0 it does
#: (jax/_src/cache_key.py clears `xla_gpu_per_fusion_autotune_cache_dir` from 0.11.0 on,
#: jax-ml/jax ad707df0f9). Read from the installed distribution, without importing JAX here.
PATH_IN_KEY = tuple(int(p) for p in version("jax").split(".")[:2]) < (0, 11)


def server_container(run: ProgramRun) -> dict[str, Any]:
    pod = run.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    return dict(next(c for c in pod["containers"] if c["name"] == "vllm"))


def container_env(run: ProgramRun) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in server_container(run)["env"] if "value" in e}


@pytest.fixture(scope="module")
def vm() -> ProgramRun:
    return run_program("v5e1")


@pytest.fixture(scope="module")
def gke() -> ProgramRun:
    return run_program("v6e4-gke")


def jax_start(cache_dir: str | Path, env: dict[str, str]) -> dict[str, Any]:
    """One server start's JAX side, in a fresh process with exactly `env` (plus PATH)."""
    done = subprocess.run(
        [
            sys.executable,
            str(JAX_START),
            "--cache-dir",
            str(cache_dir),
            "--workload",
            "small",
            "--functions",
            str(FUNCTIONS),
        ],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


# --- rendering: both backends, from config ---------------------------------------------------


def test_both_backends_render_every_compile_cached_by_default(
    vm: ProgramRun, gke: ProgramRun
) -> None:
    assert docker_run_env(start_text(vm))[MIN_COMPILE_TIME_ENV] == "0"
    assert container_env(gke)[MIN_COMPILE_TIME_ENV] == "0"


def test_the_setting_is_the_containers_environment_not_a_vllm_flag(
    vm: ProgramRun, gke: ProgramRun
) -> None:
    script = start_text(vm)
    run_block = script[script.index("sudo docker run") :]
    flag = f"  -e {MIN_COMPILE_TIME_ENV}=0 \\"
    assert flag in run_block.splitlines()  # a line of its own
    assert run_block.index(flag) < run_block.index("vllm serve ")  # before the image
    serve = run_block[run_block.index("vllm serve ") :]
    assert "JAX" not in serve and "minCompile" not in serve
    assert not any("JAX" in a for a in vm.outputs["vllm_args"])
    assert not any("JAX" in a for a in server_container(gke)["args"])


@pytest.mark.parametrize(("value", "rendered"), [(2.5, "2.5"), ("1", "1"), (0.25, "0.25")])
def test_a_configured_threshold_reaches_both_backends(value: Any, rendered: str) -> None:
    vm = run_program("v5e1", {KEY: value})
    gke = run_program("v6e4-gke", {KEY: value})
    assert docker_run_env(start_text(vm))[MIN_COMPILE_TIME_ENV] == rendered
    assert container_env(gke)[MIN_COMPILE_TIME_ENV] == rendered
    # Seed 000's `vllm serve` flags stay exactly as they are.
    assert vm.outputs["vllm_args"] == run_program("v5e1").outputs["vllm_args"]


def test_the_threshold_is_not_part_of_the_cache_key(vm: ProgramRun) -> None:
    """JAX's key (jax/_src/cache_key.py) does not contain it: the stored cache stays usable."""
    assert run_program("v5e1", {KEY: 3}).outputs["compile_cache"] == vm.outputs["compile_cache"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "= -1"), ("soon", "= 'soon'"), ("nan", "= 'nan'"), ("inf", "= 'inf'"), (True, "= true")],
)
def test_a_bad_threshold_is_refused_before_anything_is_created(value: Any, shown: str) -> None:
    refused("v5e1", {KEY: value}, KEY, [f"{KEY} {shown}", "seconds >= 0"])


# --- (a) real JAX with the rendered environment ---------------------------------------------


@pytest.mark.parametrize("backend", ["vm", "gke"])
def test_with_the_rendered_environment_every_compile_writes_an_entry(
    backend: str, vm: ProgramRun, gke: ProgramRun, tmp_path: Path
) -> None:
    env = docker_run_env(start_text(vm)) if backend == "vm" else container_env(gke)
    cache = tmp_path / CONTAINER_CACHE
    result = jax_start(cache, env)
    assert result["requests"] == FUNCTIONS
    assert result["entries"] == result["misses"] == FUNCTIONS  # one entry per compile
    assert result["hits"] == 0


def test_with_jax_defaults_no_small_compile_is_written(tmp_path: Path) -> None:
    result = jax_start(tmp_path / CONTAINER_CACHE, {})
    assert result["threshold"] == 1.0  # jax/_src/config.py's default
    assert result["requests"] == FUNCTIONS
    assert result["entries"] == result["misses"] == 0


# --- (b), (c) end to end: the node tool and a bucket between two nodes ----------------------


@dataclass
class Saved:
    bucket: Bucket
    root: Path
    env: dict[str, str]
    cold: dict[str, Any]
    first_start: dict[str, Any]
    saved: dict[str, Any]


@pytest.fixture(scope="module")
def saved(vm: ProgramRun) -> Iterator[Saved]:
    """Node 1: starts cold, compiles with the VM's rendered environment, saves; then its disk
    (the cache directory and the tool's work directory) is deleted."""
    root = Path(tempfile.mkdtemp(prefix="tpu-vllm-jax-"))
    metadata = FakeMetadataServer().start()
    api = FakeGcsApi(root / "gcs", token=metadata.access_token).start()
    try:
        prefix = str(vm.outputs["compile_cache"])
        GcsStore(str(root / "gcs")).create_bucket(prefix[len("gs://") :].split("/", 1)[0])
        bucket = Bucket(api, metadata, prefix, root / "gcs", via="gcloud")
        env = docker_run_env(start_text(vm))
        node1 = root / "node1"
        cache = root / CONTAINER_CACHE
        cold = bucket.restore(node1 / "work", cache)
        first = jax_start(cache, env)
        summary = bucket.save(node1 / "work")
        shutil.rmtree(node1)
        shutil.rmtree(root / "root")
        yield Saved(bucket, root, env, cold, first, summary)
    finally:
        api.stop()
        metadata.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_fresh_node_restoring_the_same_path_recompiles_nothing(saved: Saved) -> None:
    assert saved.cold["restored"] is False
    assert saved.first_start["entries"] == FUNCTIONS
    assert saved.saved["ok"] is True and saved.saved["uploaded"] == FUNCTIONS
    cache = saved.root / CONTAINER_CACHE
    assert not cache.exists()  # node 1's disk is gone
    saved.bucket.via = "api"
    warm = saved.bucket.restore(saved.root / "node2" / "work", cache)
    assert warm["restored"] is True and warm["files"] == FUNCTIONS
    second = jax_start(cache, saved.env)
    assert second["requests"] == FUNCTIONS
    assert second["hits"] == FUNCTIONS
    assert second["misses"] == 0


def test_restoring_under_another_path_hits_only_from_jax_0_11(saved: Saved) -> None:
    """Before jax 0.11.0, JAX's key contains the cache directory's absolute path
    (jax/_src/compiler.py `get_compile_options` puts `xla_gpu_per_fusion_autotune_cache_dir`
    under it, in the debug options jax/_src/cache_key.py hashes), so a copy under another path
    misses every entry. jax 0.11.0 clears that option in cache_key.py (jax-ml/jax ad707df0f9),
    and tpu-inference pins jax==0.11.0 (requirements.txt), so the image's JAX hits there too.
    The in-container path stays fixed anyway: cheap insurance for an older image, and where
    tpu-inference points the cache by default."""
    elsewhere = saved.root / "elsewhere" / ".cache" / "vllm" / "xla_cache"
    saved.bucket.via = "gcloud"
    warm = saved.bucket.restore(saved.root / "node3" / "work", elsewhere)
    assert warm["restored"] is True and warm["files"] == FUNCTIONS  # the files are there
    third = jax_start(elsewhere, saved.env)
    assert third["requests"] == FUNCTIONS
    if PATH_IN_KEY:
        assert third["hits"] == 0
        assert third["misses"] == FUNCTIONS
    else:
        assert third["hits"] == FUNCTIONS
        assert third["misses"] == 0


def test_the_path_reaches_the_key_only_through_the_autotune_cache_dir(tmp_path: Path) -> None:
    """The cause, shown directly: with JAX's extra XLA caches off
    (`JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none`, jax/_src/config.py
    `jax_persistent_cache_enable_xla_caches`, default `xla_gpu_per_fusion_autotune_cache_dir`),
    compiler.py sets no path in the compile options, and a copy under another path hits on
    every JAX version; with the default it hits only where cache_key.py clears the path."""
    env = {MIN_COMPILE_TIME_ENV: "0"}
    results = {}
    for caches, extra in (("default", {}), ("none", {XLA_CACHES_ENV: "none"})):
        here, there = tmp_path / caches / "a" / "xla_cache", tmp_path / caches / "b" / "xla_cache"
        first = jax_start(here, {**env, **extra})
        assert first["entries"] == first["misses"] == FUNCTIONS
        shutil.copytree(here, there)
        results[caches] = jax_start(there, {**env, **extra})
    assert results["none"]["hits"] == FUNCTIONS and results["none"]["misses"] == 0
    assert results["default"]["hits"] == (0 if PATH_IN_KEY else FUNCTIONS)
