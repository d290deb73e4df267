"""The compile cache's cloud side under mocks: bucket, grant, lifecycle, key and outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.compile_cache import (
    CONTAINER_CACHE_DIR,
    FOLDER,
    UNUSED_DAYS,
    WRITER_ROLE,
    cache_key,
    cache_prefix,
    key_material,
)
from components.config import ConfigError, parse_stack_config
from components.remote_scripts import XLA_CACHE_MODULES
from scripts.program_runner import stack_file_config
from tests.support.pulumi_program import TEST_PROJECT, run_program
from tests.support.remote_stack import READY, START, commands
from tests.support.stack_config import config_for

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "gcp:storage/bucket:Bucket"
MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"


@pytest.mark.parametrize("stack", ["v5e1", "v6e4"])
def test_the_bucket_is_private_uniform_and_forgets_unused_generations(stack: str) -> None:
    run = run_program(stack)
    bucket = run.one(BUCKET).inputs
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["name"] == run.outputs["compile_cache"].split("/")[2]
    assert bucket["project"] == TEST_PROJECT
    assert bucket["location"] == config_for(stack).tpu.zones[0].rsplit("-", 1)[0].upper()
    assert bucket["forceDestroy"] is True
    [rule] = bucket["lifecycleRules"]
    assert rule["action"] == {"type": "Delete"}
    assert rule["condition"]["daysSinceCustomTime"] == UNUSED_DAYS == 30
    assert rule["condition"]["matchesPrefixes"] == [f"{FOLDER}/"]
    # Not by age: a cache in daily use must not be deleted and recompiled every month.
    assert "age" not in rule["condition"]
    assert run.urn_of("compile-cache-bucket").count("CompileCache") == 1  # parented


def test_only_the_node_service_account_is_granted_write_access() -> None:
    run = run_program("v5e1")
    [member] = run.of_type(MEMBER)
    sa = run.one("gcp:serviceaccount/account:Account")
    email = f"{sa.inputs['accountId']}@{TEST_PROJECT}.iam.gserviceaccount.com"
    assert member.inputs["member"] == f"serviceAccount:{email}"
    assert member.inputs["role"] == WRITER_ROLE == "roles/storage.objectUser"
    assert member.inputs["bucket"] == run.one(BUCKET).inputs["name"]
    assert not [r for r in run.resources if "IAMBinding" in r.type or "IAMPolicy" in r.type]


def test_an_existing_bucket_is_used_instead_of_a_new_one() -> None:
    run = run_program("v5e1", {"tpu-vllm:cache.bucket": "team-xla-cache"})
    assert not run.of_type(BUCKET)
    [member] = run.of_type(MEMBER)
    assert member.inputs["bucket"] == "team-xla-cache"
    assert run.outputs["compile_cache"].startswith("gs://team-xla-cache/xla-cache/")


def test_a_disabled_cache_creates_nothing_and_says_so_in_the_outputs() -> None:
    run = run_program("v5e1", {"tpu-vllm:cache.enabled": False})
    assert not run.of_type(BUCKET) and not run.of_type(MEMBER)
    assert run.outputs["compile_cache"] == ""
    start = next(r for r in run.of_type("command:remote:Command") if r.name == "vllm-start")
    assert "xla_cache.py off" in start.inputs["create"]
    assert "cache_prefix=" not in start.inputs["create"]


def test_the_prefix_is_known_at_preview() -> None:
    run = run_program("v5e1", preview=True, outputs_for=None)
    assert run.outputs["compile_cache"] == cache_prefix(config_for("v5e1"))
    assert run.outputs["compile_cache"].endswith(f"/{cache_key(config_for('v5e1'))}/")


KEYED = [
    ("tpu-vllm:model.id", "google/gemma-4-E4B-it"),
    ("tpu-vllm:vllm.maxModelLen", 16384),
    ("tpu-vllm:vllm.maxNumBatchedTokens", 8192),
    ("tpu-vllm:vllm.dtype", "float32"),
    ("tpu-vllm:vllm.kvCacheDtype", "fp8_e5m2"),
    ("tpu-vllm:vllm.gpuMemoryUtilization", 0.9),
    ("tpu-vllm:vllm.enablePrefixCaching", False),
    ("tpu-vllm:vllm.limitMmPerPrompt", {"image": 2, "audio": 1}),
    ("tpu-vllm:vllm.extraArgs", ["--max-num-seqs", "64"]),
]


@pytest.mark.parametrize(("path", "value"), KEYED, ids=[p.split(".")[-1] for p, _ in KEYED])
def test_every_shape_changing_flag_changes_the_key(path: str, value: Any) -> None:
    changes = {path: value}
    if path == "tpu-vllm:model.id":
        changes["tpu-vllm:model.weightsGiB"] = 8.0
    before = run_program("v5e1").outputs["compile_cache"]
    after = run_program("v5e1", changes).outputs["compile_cache"]
    assert after != before
    assert after.rsplit("/", 2)[0] == before.rsplit("/", 2)[0]  # same bucket and folder


def test_the_accelerator_and_tensor_parallel_size_change_the_key() -> None:
    one = config_for("v5e1")
    four = config_for("v5e1", {"tpu-vllm:tpu.chip": "v5e-4", "tpu-vllm:vllm.tensorParallelSize": 4})
    assert key_material(four)["accelerator_type"] == "v5litepod-4"
    assert key_material(four)["tensor_parallel_size"] == 4
    assert cache_key(one) != cache_key(four)
    assert cache_key(config_for("v6e4")) not in (cache_key(one), cache_key(four))


@pytest.mark.parametrize(
    "changes",
    [
        {"tpu-vllm:vllm.port": 8080},
        {"tpu-vllm:vllm.toolCallParser": "hermes"},
        {"tpu-vllm:vllm.reasoningParser": None},
        {"tpu-vllm:vllm.readinessTimeout": "45m"},
        {"tpu-vllm:vllm.image": "vllm/vllm-tpu:2026-11-01"},
        {"tpu-vllm:cache.restoreTimeout": "1m"},
    ],
    ids=["port", "tool-parser", "reasoning-parser", "readiness-timeout", "image-tag", "restore"],
)
def test_what_changes_no_compiled_program_keeps_the_key(changes: dict[str, Any]) -> None:
    """The image is keyed on the VM by digest (the generation), not by its tag here."""
    assert cache_prefix(config_for("v5e1", changes)) == cache_prefix(config_for("v5e1"))


def test_the_key_is_stable_across_runs_and_projects_only_change_the_bucket() -> None:
    base = config_for("v5e1")
    assert cache_key(base) == cache_key(config_for("v5e1"))
    other = parse_stack_config(
        {k.split(":", 1)[1]: v for k, v in stack_file_config("v5e1").items()},
        project="another-project",
        stack="v5e1",
    )
    assert cache_key(other) == cache_key(base)
    assert cache_prefix(other) != cache_prefix(base)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tpu-vllm:cache.bucket": "Bad_Bucket!"}, "tpu-vllm:cache.bucket = 'Bad_Bucket!'"),
        ({"tpu-vllm:cache.enabled": "yes"}, "tpu-vllm:cache.enabled = 'yes'"),
        ({"tpu-vllm:cache.restoreTimeout": "soon"}, "tpu-vllm:cache.restoreTimeout = 'soon'"),
        ({"tpu-vllm:cache.bukket": "x"}, "did you mean `bucket`"),
    ],
)
def test_bad_cache_config_is_rejected_before_anything_is_created(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        config_for("v5e1", changes)
    assert message in str(error.value)
    run = run_program("v5e1", changes, expect_error=True)
    assert not run.resources


def test_a_gs_url_names_the_bucket_too() -> None:
    config = config_for("v5e1", {"tpu-vllm:cache.bucket": "gs://team-xla-cache/"})
    assert config.cache.bucket == "team-xla-cache"
    assert config.cache.enabled is True and config.cache.restore_timeout_seconds == 300


@pytest.mark.parametrize("stack", ["v5e1", "v6e4", "v6e4-gke"])
def test_the_server_sees_its_cache_at_the_same_absolute_path_everywhere(stack: str) -> None:
    """Before jax 0.11.0, JAX's cache key contains the cache directory's absolute path
    (compiler.py's autotune cache dir, hashed by cache_key.py): a cache restored to another path
    never hits there. So the server sees it at CONTAINER_CACHE_DIR on every VM and in every GKE
    pod (the image's jax 0.11.0 no longer keys on it; the fixed path is cheap insurance)."""
    assert CONTAINER_CACHE_DIR == "/root/.cache/vllm/xla_cache"
    mount, sub = CONTAINER_CACHE_DIR.rsplit("/", 1)
    run = run_program(stack)
    overrides = ("VLLM_XLA_CACHE_PATH", "JAX_COMPILATION_CACHE_DIR")
    if stack.endswith("-gke"):
        pod = run.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
        everyone = {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}
        for container in everyone.values():
            [cache] = [m for m in container["volumeMounts"] if m["name"] == "vllm-cache"]
            assert cache["mountPath"] == mount, container["name"]
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert not set(overrides) & set(env), container["name"]
            if "CACHE_DIR" in env:  # the restore and the save work on the server's directory
                assert env["CACHE_DIR"] == CONTAINER_CACHE_DIR
        assert {"xla-cache-restore", "xla-cache-save"} <= set(everyone)
    else:
        start = next(r for r in run.of_type("command:remote:Command") if r.name == "vllm-start")
        text = start.inputs["create"]
        assert f"-v ~/.cache/vllm:{mount} \\" in text
        assert not any(o in text for o in overrides)
        # The restore fills the host side of that mount.
        assert f"--dir ~/.cache/vllm/{sub} \\" in text


#: Linux's limit on one argument string, execve(2) "Limits on size of arguments and
#: environment": MAX_ARG_STRLEN, 32 pages of 4096 bytes.
MAX_ARG_STRLEN = 32 * 4096


def test_the_start_script_writes_every_part_of_the_node_tool_and_fits_one_argument() -> None:
    """The node tool is several files that import each other: the start script writes each
    beside the tool (~/.tpu-vllm) before it runs. And it stays one argument long: sshd runs an
    exec request as `$SHELL -c COMMAND` (OpenSSH session.c `do_child`), and execve(2) refuses a
    longer single argument with E2BIG ("Argument list too long"), so the start would fail."""
    for changes in (None, {"tpu-vllm:cache.enabled": False}):
        text = commands("v5e1", changes)[START]
        for name in XLA_CACHE_MODULES:
            body = (ROOT / "scripts" / "remote" / name).read_text().rstrip("\n")
            assert f"cat > ~/.tpu-vllm/{name} <<'TPU_VLLM_XLA_CACHE'\n{body}\n" in text, name
        assert len(text.encode()) < MAX_ARG_STRLEN, len(text.encode())


def test_the_readiness_command_leaves_a_watcher_that_saves_every_save_interval() -> None:
    """After ready the VM keeps a watcher of this container: a save now, every
    `cache.saveInterval` (default 5m) and when the container stops."""
    cid = "0123456789ab" * 4
    ready = commands("v5e1", start_stdout=f"{cid}\n")[READY]
    assert (
        "setsid nohup python3 ~/.tpu-vllm/xla_cache.py watch \\\n"
        "    --work ~/.tpu-vllm/xla-cache \\\n"
        f"    --container {cid} \\\n"
        "    --every 300 </dev/null"
    ) in ready
    changed = commands("v5e1", {"tpu-vllm:cache.saveInterval": "30m"}, start_stdout=cid)[READY]
    assert "    --every 1800 </dev/null" in changed


@pytest.mark.parametrize("value", ["0s", "soon", "-5m"])
def test_a_save_interval_that_is_not_a_positive_duration_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"cache\.saveInterval.*not a duration"):
        config_for("v5e1", {"tpu-vllm:cache.saveInterval": value})
