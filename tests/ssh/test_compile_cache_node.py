"""The compile cache over real SSH: cold node saves, next fresh node restores before `docker run`.

Each "node" is a fresh SshHost (empty home, its own fake docker) that shares one fake Cloud
Storage bucket, a local directory behind the fake `gcloud storage`
(tests/support/fakes/fake_gcloud.py) and the fake JSON API (tests/support/fakes/gcs_api.py). The
fake container models JAX's cache in its `~/.cache/vllm` mount: a cold boot writes one entry per
compiled subgraph, and a boot that finds all of them intact replays the warm log (fake_docker.Boot).
The commands are the program's own text, as `remote.Command` would send them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.compile_cache import generation_name
from tests.support.compile_cache_lab import API_SENTINEL, COLD, HF_SENTINEL, SPEED, WARM, Lab, Start
from tests.support.fakes.gcs_api import QUICK_RETRIES, FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.fakes.ssh_host import SshHostFactory
from tests.support.privileged import skip_or_fail
from tests.support.pulumi_program import run_program
from tests.support.remote_stack import START, commands, container_log, rfc3339
from tests.support.xla_cache_tool import load_tool

COMPILED = 60  # "Compilation of ..." lines in the cold log: one cache entry each


@pytest.fixture
def lab(
    ssh_host_factory: SshHostFactory,
    fake_secret_manager: FakeSecretManager,
    fake_metadata: FakeMetadataServer,
) -> Iterator[Lab]:
    root = Path(tempfile.mkdtemp(prefix="tpu-vllm-gcs-", dir=os.environ.get("TPU_VLLM_SSH_TMPDIR")))
    api = FakeGcsApi(root).start()
    try:
        yield Lab(ssh_host_factory, fake_secret_manager, fake_metadata, root, api)
    finally:
        api.stop()
        shutil.rmtree(root, ignore_errors=True)


def cold_then_saved(lab: Lab, **node_args: Any) -> Start:
    first = lab.start(lab.node(**node_args))
    assert first.code == 0, first.stdout
    assert first.wait_saved()["ok"], first.save_log()
    lab.open_up()
    # Its node is gone (flex-start expiry): the next node serves on the same loopback port.
    # Its watcher saw the container stop and saved once more (nothing new): let that end
    # before a test changes the bucket under it.
    first.node.docker.kill_all()
    assert first.wait_last_save()["ok"], first.save_log()
    lab.open_up()
    return first


def test_cold_start_writes_the_cache_after_ready(lab: Lab) -> None:
    first = lab.start(lab.node())
    assert first.code == 0, first.stdout
    cache = first.result["cache"]
    assert cache["restored"] is False
    assert "no cache" in cache["reason"]
    assert first.xla_cache == "cold"
    saved = first.wait_saved()
    assert saved["ok"] and saved["uploaded"] == COMPILED, first.save_log()
    lab.open_up()
    generation = saved["generation"]
    assert generation == cache["generation"] and generation.startswith(lab.prefix)
    names = lab.objects()
    files = [n for n in names if n.endswith("-cache")]
    assert len(files) == COMPILED
    assert any(n.endswith("/MANIFEST.json") for n in names)
    latest = lab.store.get(lab.bucket, lab.prefix[len(f"gs://{lab.bucket}/") :] + "LATEST")
    assert generation.endswith(latest.decode() + "/")
    # Saved after `Application startup complete.`, and every object carries the custom time
    # the lifecycle rule counts from.
    uploaded = [lab.store.meta(lab.bucket, n) for n in names]
    ready = next(
        r for r in container_log(first.node, first.container) if "startup complete" in r["log"]
    )
    assert min(float(m["updated"]) for m in uploaded) >= rfc3339(ready["time"])
    assert all(m.get("customTime") for m in uploaded)
    assert "compile cache: cold" in first.stdout


def test_next_fresh_node_restores_before_docker_run(lab: Lab) -> None:
    first = cold_then_saved(lab)
    second_node = lab.node()
    assert not (second_node.home / ".cache" / "vllm" / "xla_cache").exists()  # empty home
    second = lab.start(second_node)
    assert second.code == 0, second.stdout
    cache = second.result["cache"]
    assert cache["restored"] is True, (cache, second.start_stderr)
    assert cache["files"] == COMPILED and cache["bytes"] == COMPILED * 16384
    assert cache["generation"] == first.result["cache"]["generation"]
    assert cache["seconds"] >= 0
    # The container found every entry already there: it replayed the warm boot.
    assert second.xla_cache == "warm"
    # The download finished before `docker run` was called.
    downloads = [
        c["time"] for c in lab.gcloud_calls(second_node) if c["argv"][1:3] == ["storage", "rsync"]
    ]
    [run] = [c for c in second_node.docker.invocations() if c["argv"][1:2] == ["run"]]
    assert downloads and max(downloads) < rfc3339(run["time"])
    assert "compile cache: warm" in second.stdout
    # Nothing new to upload: the save only marks the generation as used.
    saved = second.wait_saved()
    assert saved["ok"] and saved["uploaded"] == 0


def test_the_restore_runs_alongside_the_image_pull(lab: Lab) -> None:
    cold_then_saved(lab)
    node = lab.node(images=())  # the image is not pulled yet
    second = lab.start(node)
    assert second.code == 0
    assert second.result["cache"]["restored"] is True
    calls = node.docker.invocations()
    pulls = [c for c in calls if c["argv"][1:2] == ["pull"]]
    assert len(pulls) == 1
    text = commands("v5e1")[START]
    # The pull runs in the background; the fetch and install need only the pinned digest, so
    # they run beside it and the pull is awaited last, before `docker run`.
    assert text.index("docker pull") < text.index("fetch \\") < text.index("install \\")
    assert (
        text.index("install \\") < text.index('wait "$image_pull"') < text.index("sudo docker run")
    )


def test_the_restore_reports_and_bounds_its_own_time_not_the_pull(lab: Lab) -> None:
    """`cache.seconds` is the restore's overhead, and `cache.restoreTimeout` bounds the
    restore: the image pull it runs alongside counts toward neither. A pull longer than the
    bound still gets a warm start from the generation fetched meanwhile."""
    cold_then_saved(lab)
    node = lab.node(images=())  # the image is not pulled yet
    pull_seconds = 6.0
    node.docker.set_pull_seconds(pull_seconds)
    second = lab.start(node, {"tpu-vllm:cache.restoreTimeout": "4s"})
    assert second.code == 0, second.stdout
    pulls = [c for c in node.docker.invocations() if c["argv"][1:2] == ["pull"]]
    assert len(pulls) == 1  # the pull really ran, alongside the fetch
    cache = second.result["cache"]
    assert cache["restored"] is True, (cache, second.start_stderr)
    assert second.xla_cache == "warm"
    # Within its own bound (4 s), so certainly not the 6 s pull it overlapped.
    assert cache["seconds"] <= 4.0, cache


@pytest.mark.parametrize(
    "changes",
    [{"tpu-vllm:vllm.maxModelLen": 16384}, {"tpu-vllm:vllm.maxNumBatchedTokens": 8192}],
    ids=["max-model-len", "max-num-batched-tokens"],
)
def test_a_changed_key_does_not_restore_and_writes_a_new_generation(
    lab: Lab, changes: dict[str, Any]
) -> None:
    cold_then_saved(lab)
    other = lab.prefix_for(changes)
    assert other != lab.prefix
    second = lab.start(lab.node(), changes)
    assert second.code == 0
    cache = second.result["cache"]
    assert cache["restored"] is False and "no cache" in cache["reason"]
    assert second.xla_cache == "cold"
    assert second.wait_saved()["ok"]
    lab.open_up()
    assert len([n for n in lab.objects(other) if n.endswith("-cache")]) == COMPILED


def lab_image_generation(changes: dict[str, Any]) -> str:
    """The generation of the image the program pins for these changes (mocked registry)."""
    return generation_name(run_program("v5e1", changes).outputs["image"])


def test_another_image_digest_is_never_restored(lab: Lab) -> None:
    cold_then_saved(lab)
    changes = {"tpu-vllm:vllm.image": "vllm/vllm-tpu:2026-11-01"}
    assert lab.prefix_for(changes) == lab.prefix  # same key: the digest is the generation
    second = lab.start(lab.node(images=()), changes)
    assert second.code == 0
    cache = second.result["cache"]
    assert cache["restored"] is False and "no cache for this image" in cache["reason"]
    # The fetch went straight for the new digest's generation, never the saved one.
    pinned = lab_image_generation(changes)
    assert f"fetching {lab.prefix}{pinned}/" in second.start_stderr
    assert "fetching" not in second.start_stderr.replace(f"fetching {lab.prefix}{pinned}/", "")
    assert cache["generation"] == f"{lab.prefix}{pinned}/"
    assert second.xla_cache == "cold"


def test_a_corrupt_entry_is_dropped_and_logged_and_the_start_succeeds(lab: Lab) -> None:
    cold_then_saved(lab)
    victim = next(n for n in lab.objects() if n.endswith("-cache"))
    path = lab.root / lab.bucket / victim
    path.write_bytes(b"garbage" + path.read_bytes()[7:])
    second = lab.start(lab.node())
    assert second.code == 0, second.stdout
    cache = second.result["cache"]
    assert cache["restored"] is True and cache["files"] == COMPILED - 1
    assert "1 corrupt or missing entries dropped" in cache["reason"]
    assert f"dropping {victim.rsplit('/', 1)[-1]}" in second.start_stderr
    # One entry short: the container compiles (that one) again.
    assert second.xla_cache == "cold"
    # Its save has the entry again, and the object under that name does not hold the bytes
    # the manifest records: it is uploaded again (on the condition that it is still the
    # corrupt object), so the next node restores every entry and starts warm.
    saved = second.wait_saved()
    assert saved["ok"] and saved["uploaded"] == 1, second.save_log()
    record = json.loads(lab.store.get(lab.bucket, victim.rsplit("/", 1)[0] + "/MANIFEST.json"))
    fixed = lab.store.meta(lab.bucket, victim)
    assert record["files"][victim.rsplit("/", 1)[-1]]["md5"] == fixed["md5Hash"]
    second.node.docker.kill_all()
    assert second.wait_last_save()["ok"]
    lab.open_up()
    third = lab.start(lab.node())
    cache = third.result["cache"]
    assert cache["restored"] is True and cache["files"] == COMPILED, third.start_stderr
    assert not cache["reason"], cache
    assert third.xla_cache == "warm"


def test_a_partial_generation_without_manifest_is_not_restored(lab: Lab) -> None:
    cold_then_saved(lab)
    manifest = next(n for n in lab.objects() if n.endswith("MANIFEST.json"))
    lab.store.delete(lab.bucket, manifest)
    second = lab.start(lab.node())
    assert second.code == 0
    cache = second.result["cache"]
    assert cache["restored"] is False and "no manifest" in cache["reason"]
    assert "not restored" in second.start_stderr


def test_a_failed_restore_is_logged_and_the_start_goes_on_cold(lab: Lab) -> None:
    cold_then_saved(lab)
    lab.store.set_fault("download", fail="backendError: the service is unavailable")
    lab.open_up()
    second = lab.start(lab.node())
    assert second.code == 0
    cache = second.result["cache"]
    assert cache["restored"] is False
    assert "backendError" in second.start_stderr
    assert second.xla_cache == "cold"


def test_a_slow_restore_is_cut_off_at_the_bound(lab: Lab) -> None:
    cold_then_saved(lab)
    lab.store.set_fault("download", delay=60)
    lab.open_up()
    changes = {"tpu-vllm:cache.restoreTimeout": "2s"}
    node = lab.node()
    began = time.monotonic()
    second = lab.start(node, changes)
    assert second.code == 0
    assert time.monotonic() - began < 45  # not the 60 s stall: the restore was stopped
    assert second.result["cache"]["restored"] is False
    assert "stopped" in second.start_stderr or "out of time" in second.start_stderr


def test_a_failed_upload_is_logged_and_does_not_fail_the_deployment(lab: Lab) -> None:
    lab.store.set_fault("write", fail="backendError: upload refused")
    lab.open_up()
    first = lab.start(lab.node())
    assert first.code == 0
    saved = first.wait_saved()
    assert saved["ok"] is False and "HTTP 503" in saved["error"], saved
    assert "save FAILED" in first.save_log()
    assert not [n for n in lab.objects() if n.endswith("MANIFEST.json")]


def test_a_slow_upload_does_not_delay_the_readiness_line(lab: Lab) -> None:
    lab.store.set_fault("write", delay=3)  # each of the 60 uploads, 16 at a time
    lab.open_up()
    first = lab.start(lab.node())
    assert first.code == 0
    assert "TPU_VLLM_READY" in first.stdout
    # The readiness command has returned while the upload still stalls.
    assert not (first.work / "save.json").exists()
    assert not [n for n in lab.objects() if n.endswith("-cache")]
    saved = first.wait_saved(timeout=40)
    assert saved["ok"] and saved["uploaded"] == COMPILED


def test_the_json_api_fallback_saves_and_restores_without_gcloud(lab: Lab) -> None:
    first = cold_then_saved(lab, via="api")
    assert not [c for c in lab.gcloud_calls(first.node) if c["argv"][1:2] == ["storage"]]
    second = lab.start(lab.node(via="api"))
    cache = second.result["cache"]
    assert cache["restored"] is True and cache["files"] == COMPILED
    assert second.xla_cache == "warm"
    methods = {(r["method"], r["path"].split("?")[0].split("/o/")[0]) for r in lab.api.requests}
    assert ("POST", f"/upload/storage/v1/b/{lab.bucket}/o") in methods


def test_no_secret_crosses_into_the_cache_commands(lab: Lab) -> None:
    first = cold_then_saved(lab)
    second = lab.start(lab.node())
    assert second.result["cache"]["restored"] is True
    api_first = cold_then_saved(lab, via="api")
    sentinels = (HF_SENTINEL, API_SENTINEL)
    for start in (first, second, api_first):
        for call in lab.gcloud_calls(start.node):
            if call["argv"][1:2] != ["storage"]:
                continue
            text = json.dumps(call)
            assert not any(s in text for s in sentinels), call["argv"]
    for request in lab.api.requests:
        blob = json.dumps({k: v for k, v in request.items() if k != "body"}) + repr(request["body"])
        assert not any(s in blob for s in sentinels)
    for folder, _dirs, files in os.walk(lab.root):
        for name in files:
            data = Path(folder, name).read_bytes()
            assert not any(s.encode() in data for s in sentinels), name
    for start in (first, second):
        tool = (start.node.home / ".tpu-vllm" / "xla_cache.py").read_text()
        assert not any(s in tool for s in sentinels)


def test_the_node_and_the_program_name_generations_alike() -> None:
    tool = load_tool()
    for digest in (
        "vllm/vllm-tpu@sha256:" + "ab" * 32,
        "sha256:" + "0f" * 32,
        "not-a-digest",
    ):
        assert tool.generation_name(digest) == generation_name(digest)
    assert generation_name("vllm/vllm-tpu@sha256:" + "ab" * 32) == "img-abababababababab"


def test_a_restore_that_never_learns_the_digest_leaves_nothing_for_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart on the same VM with another key and an image that names no digest (never the
    case: the stack pins it): the save after ready must not upload this start's cache under the
    previous start's key."""
    tool = load_tool()
    work, cache_dir = tmp_path / "work", tmp_path / "xla_cache"
    cache_dir.mkdir()
    (cache_dir / "jit_new-cache").write_bytes(b"compiled for the new key")
    old = {"prefix": "gs://b/xla-cache/OLDKEY/", "generation": "img-old", "dir": str(cache_dir)}
    tool.write_json(str(work / "state.json"), old)  # left by the previous start on this VM

    def no_bucket() -> None:
        raise AssertionError("the bucket was used")

    monkeypatch.setattr(tool.restore, "transport", no_bucket)
    monkeypatch.setattr(tool.watch, "api_store", no_bucket)
    install = ["install", "--work", str(work), "--prefix", "gs://b/xla-cache/NEWKEY/"]
    assert tool.main([*install, "--timeout", "5", "--dir", str(cache_dir), "--image", "i:t"]) == 0
    assert "is not pinned" in tool.read_json(str(work / "result.json"))["reason"]
    assert tool.main(["save", "--work", str(work)]) == 0  # nothing to save, bucket untouched


def test_a_disabled_cache_touches_no_bucket(lab: Lab) -> None:
    changes = {"tpu-vllm:cache.enabled": False}
    node = lab.node()
    first = lab.start(node, changes)
    assert first.code == 0
    cache = first.result["cache"]
    assert cache == {**cache, "restored": False, "generation": ""}
    assert "disabled" in cache["reason"]
    assert not [c for c in lab.gcloud_calls(node) if c["argv"][1:2] == ["storage"]]
    time.sleep(1)
    assert not lab.objects()


# --- a root server, an older Cloud SDK, timestamps, and the order of a save ---------------------


def test_a_restore_works_in_the_cache_directory_the_root_server_created(lab: Lab) -> None:
    """The server runs as root (tpu-inference's image has no USER) and JAX creates the cache
    directory itself, so after a start that did not restore first (here: with the cache off)
    `~/.cache/vllm/xla_cache` on the VM is root's, 0755, and so is every entry in it. A later
    start on that VM must still restore into it; and with JAX eviction off (the default) it
    writes no `-atime` stamps."""
    cold_then_saved(lab)  # another node saved this configuration's generation
    node = lab.node()
    if not node.root_modelled:
        skip_or_fail("the fake container writes as root only when the tests run as root")
    # Other flags, so that the restore below has every file to write, none to keep.
    first = lab.start(node, {"tpu-vllm:cache.enabled": False, "tpu-vllm:vllm.maxModelLen": 16384})
    assert first.code == 0, first.stdout
    cache_dir = node.home / ".cache" / "vllm" / "xla_cache"
    info = cache_dir.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o755)  # as JAX left it, as root
    assert {p.stat().st_uid for p in cache_dir.iterdir()} == {0}
    assert len(list(cache_dir.iterdir())) == COMPILED

    second = lab.start(node)
    cache = second.result["cache"]
    assert cache["restored"] is True, (cache, second.start_stderr)
    assert cache["files"] == COMPILED
    assert second.xla_cache == "warm"
    # Every entry is stamped (JAX's eviction needs them; without it JAX ignores them).
    assert len(list(cache_dir.glob("*-atime"))) == COMPILED


@pytest.mark.parametrize("installed", ["cat,cp", "none"], ids=["no-rsync", "no-storage-group"])
def test_an_older_cloud_sdk_falls_back_to_the_json_api(lab: Lab, installed: str) -> None:
    """gcloud is on PATH but its `storage` lacks `rsync` / `objects update` (or the whole
    group): it refuses the command line with exit status 2 and "Invalid choice". The restore
    then uses the JSON API (the save always does), so the next node's restore still works."""
    old_sdk = {"FAKE_GCLOUD_STORAGE_COMMANDS": installed}
    first = lab.start(lab.node(env=old_sdk))
    assert first.code == 0, first.stdout
    saved = first.wait_saved()
    assert saved["ok"] and saved["uploaded"] == COMPILED, first.save_log()
    lab.open_up()
    assert len([n for n in lab.objects() if n.endswith("-cache")]) == COMPILED

    node = lab.node(env=old_sdk)
    second = lab.start(node)
    cache = second.result["cache"]
    assert cache["restored"] is True, (cache, second.start_stderr)
    assert second.xla_cache == "warm"
    assert "Invalid choice" in second.start_stderr
    assert "using the Cloud Storage JSON API" in second.start_stderr  # the restore fell back
    tried = [c["argv"][1:3] for c in lab.gcloud_calls(node) if c["argv"][1:2] == ["storage"]]
    assert tried  # gcloud was asked first, as on a VM that has it


def one_more_compile(tmp: Path) -> str:
    """The cold log with one more compiled subgraph (a shape the saved cache lacks)."""
    text = (Path(__file__).parents[1] / "support" / "fixtures" / "vllm_logs" / COLD).read_text()
    last = [line for line in text.splitlines() if "Compilation of " in line][-1]
    at, stream, message = last.split("\t", 2)
    extra = "\t".join(
        [f"{float(at) + 0.01:.2f}", stream, message.replace("'num_reqs': 256", "'num_reqs': 512")]
    )
    assert extra != last
    path = tmp / "v5e1_ready_one_more.log"
    path.write_text(text.replace(last, f"{last}\n{extra}", 1))
    path.chmod(0o644)
    return str(path)


@pytest.mark.parametrize("via", ["auto", "api"])
def test_restored_files_keep_their_time_so_a_save_sends_only_what_is_new(
    lab: Lab, via: str
) -> None:
    """A restore of N entries, then one new compilation: the save uploads that one file and the
    manifest, nothing else. It compares each file with the object listed under its name (size
    and MD5, as `gcloud storage rsync` compares size and hash, rsync_command_util.py): the
    restored ones are already there."""
    cold_then_saved(lab, via=via)
    tmp = Path(tempfile.mkdtemp(prefix="tpu-vllm-log-", dir=os.environ.get("TPU_VLLM_SSH_TMPDIR")))
    tmp.chmod(0o755)
    try:
        node = lab.node(via=via)
        before = len(lab.store.uploads(lab.bucket))
        scenario = {"log": one_more_compile(tmp), "warm_log": WARM, "speed": SPEED}
        second = lab.start(node, scenario=scenario)
        assert second.code == 0, second.stdout
        cache = second.result["cache"]
        assert cache["restored"] is True and cache["files"] == COMPILED, second.start_stderr
        saved = second.wait_saved()
        assert saved["ok"] and saved["uploaded"] == 1, second.save_log()
        key = lab.prefix[len(f"gs://{lab.bucket}/") :]
        sent = sorted(u["name"][len(key) :] for u in lab.store.uploads(lab.bucket)[before:])
        generation = cache["generation"][len(lab.prefix) :]
        files = [n for n in sent if n.endswith("-cache")]
        assert len(files) == 1, f"{len(files)} cache files sent, not only the new one"
        # LATEST already names this generation: it is not written again.
        assert sent == sorted([*files, f"{generation}MANIFEST.json"]), sent
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("via", ["gcloud", "api"])
def test_latest_moves_only_after_the_files_and_the_manifest(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_metadata: FakeMetadataServer,
    via: str,
) -> None:
    """A save that breaks midway (the bucket refuses writes after two objects) leaves LATEST on
    the last complete generation, and none at all before the first: LATEST is written last,
    after the files and MANIFEST.json, or the next node would prefetch a broken generation."""
    root = tmp_path / "gcs"
    api = FakeGcsApi(root, token=fake_metadata.access_token).start()
    store = GcsStore(str(root))
    store.create_bucket("b")
    monkeypatch.setenv("TPU_VLLM_CACHE_VIA", via)
    monkeypatch.setenv("STORAGE_API_ENDPOINT", api.url)
    monkeypatch.setenv("GCE_METADATA_HOST", fake_metadata.host)
    monkeypatch.setenv("FAKE_GCS_ROOT", str(root))
    for name, value in QUICK_RETRIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(
        "PATH", f"{Path(__file__).parents[1] / 'support' / 'fakes' / 'bin'}:{os.environ['PATH']}"
    )
    monkeypatch.delenv("FAKE_DOCKER_STATE", raising=False)
    work, cache_dir = tmp_path / "work", tmp_path / "xla_cache"
    cache_dir.mkdir()
    prefix = "gs://b/xla-cache/KEY/"

    def save(generation: str, files: int) -> dict[str, Any]:
        for i in range(files):
            (cache_dir / f"jit_{generation}_{i}-{i:064x}-cache").write_bytes(os.urandom(1000))
            os.utime(cache_dir / f"jit_{generation}_{i}-{i:064x}-cache", (1.7e9, 1.7e9))
        tool = load_tool()  # a fresh process on the node
        state = {"prefix": prefix, "generation": generation, "dir": str(cache_dir)}
        tool.write_json(str(work / "state.json"), state)
        tool.main(["save", "--work", str(work), "--timeout", "60"])
        return dict(tool.read_json(str(work / "save.json")))

    try:
        store.set_fault("put", fail="backendError: the upload broke", after=2)
        broken = save("img-first", 5)
        assert broken["ok"] is False
        assert not store.exists("b", "xla-cache/KEY/LATEST")  # no pointer at a broken generation
        assert not store.exists("b", "xla-cache/KEY/img-first/MANIFEST.json")

        store.clear_faults()
        assert save("img-good", 3)["ok"] is True
        assert store.get("b", "xla-cache/KEY/LATEST") == b"img-good"

        store.set_fault("put", fail="backendError: the upload broke", after=2)
        assert save("img-next", 5)["ok"] is False
        assert store.get("b", "xla-cache/KEY/LATEST") == b"img-good"
        assert not store.exists("b", "xla-cache/KEY/img-next/MANIFEST.json")
        assert store.exists("b", "xla-cache/KEY/img-good/MANIFEST.json")

        # Every file uploaded, the manifest refused: still not a generation to point at.
        store.set_fault("put", fail="backendError: the upload broke", match="MANIFEST.json")
        assert save("img-last", 4)["ok"] is False
        assert store.exists("b", f"xla-cache/KEY/img-last/jit_img-last_3-{3:064x}-cache")
        assert store.get("b", "xla-cache/KEY/LATEST") == b"img-good"
    finally:
        api.stop()


def recorded(lab: Lab, generation: str) -> dict[str, Any]:
    """The generation's MANIFEST.json records (`generation`: its key under the bucket)."""
    raw = lab.store.get(lab.bucket, generation + "MANIFEST.json")
    return dict(json.loads(raw)["files"])


def test_a_compile_after_ready_is_saved_at_the_next_save_interval(lab: Lab) -> None:
    """Requests bring shapes the start did not compile, and JAX writes each as an entry. The
    watcher the readiness command leaves behind saves again every `cache.saveInterval` (here
    2 s): the entry is in the bucket and the manifest while the server runs on. (The VM's
    deletion at a flex-start run's end gives no moment for a last save: this is the bound.)"""
    node = lab.node()
    first = lab.start(node, {"tpu-vllm:cache.saveInterval": "2s"})
    assert first.code == 0, first.stdout
    saved = first.wait_saved()  # the save at ready, or already a periodic one after it
    assert saved["ok"], first.save_log()
    generation = saved["generation"][len(f"gs://{lab.bucket}/") :]
    cache_dir = node.home / ".cache" / "vllm" / "xla_cache"
    later = f"jit_later-{'3' * 64}-cache"
    (cache_dir / later).write_bytes(os.urandom(20_000))  # as root, as the server writes
    deadline = time.monotonic() + 60
    while later not in recorded(lab, generation) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert later in recorded(lab, generation), first.save_log()
    assert len(recorded(lab, generation)) == COMPILED + 1
    assert lab.store.get(lab.bucket, generation + later) == (cache_dir / later).read_bytes()
    # The save logs its summary after it wrote the manifest: wait for the line too.
    while "why=periodic" not in first.save_log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "why=periodic" in first.save_log()


def test_a_compile_after_ready_is_saved_when_the_container_stops(lab: Lab) -> None:
    """The watcher also saves once more when the container stops (`docker wait` returns: a
    `docker stop`, the next start's `docker rm -f`, a crash), with the default interval (5m)
    far off: the entry written after the save at ready is carried by that last save."""
    node = lab.node()
    first = lab.start(node)
    assert first.code == 0, first.stdout
    saved = first.wait_saved()
    assert saved["ok"] and saved["why"] == "ready"
    generation = saved["generation"][len(f"gs://{lab.bucket}/") :]
    cache_dir = node.home / ".cache" / "vllm" / "xla_cache"
    last = f"jit_last-{'4' * 64}-cache"
    (cache_dir / last).write_bytes(os.urandom(20_000))
    time.sleep(1.2)  # complete: older than the save's settle pause
    stopped = node.run(f"sudo docker stop {first.container}", timeout=60)
    assert stopped.returncode == 0, stopped.stderr.decode()
    summary = first.wait_last_save()
    assert summary["ok"] and summary["uploaded"] == 1, summary
    assert last in recorded(lab, generation), first.save_log()
    assert lab.store.get(lab.bucket, generation + last) == (cache_dir / last).read_bytes()
    assert "saving what is new one last time" in first.save_log()
