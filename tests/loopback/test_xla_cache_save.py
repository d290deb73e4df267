"""The node tool's save, against the loopback fake of the Cloud Storage JSON API: saves at once
lose nothing, a corrupt entry is put back, the upload pool is bounded, and the watcher saves
after ready, every `--every` seconds and on SIGTERM.

Each "node" is a work directory whose state.json is what its restore recorded (prefix,
generation, cache directory) and a cache directory with JAX's `*-cache` entries in it; each
save is a process of its own (scripts/remote/xla_cache.py, as cache_save.sh and the GKE sidecar
run it), so two of them at once are two replicas. The fake (tests/support/fakes/gcs_api.py) honours
`ifGenerationMatch` as the JSON API documents (Request preconditions) and can hold uploads
until several have arrived, the interleaving two nodes may meet. No timing is asserted beyond
bounds.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.xla_cache_save import (
    BUCKET,
    GENERATION,
    IMAGE,
    KEY,
    OLD,
    PREFIX,
    Cloud,
    Node,
    entries,
)
from tests.support.xla_cache_tool import TOOL


def restore(cloud: Cloud, root: Path) -> dict[str, Any]:
    """A fresh node's fetch and install (the GKE init container's, `--in-pod`)."""
    work, cache = root / "work", root / "xla_cache"
    common = ["--work", str(work), "--prefix", PREFIX, "--timeout", "60"]
    for args in (["fetch", *common], ["install", *common, "--dir", str(cache), "--in-pod",
                                      "--image", IMAGE]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(TOOL), *args], env=cloud.env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    return dict(json.loads((work / "result.json").read_text()))


def entry_uploads(cloud: Cloud) -> list[int]:
    """The statuses of the uploads of cache entries (not MANIFEST.json, not LATEST)."""
    return [s for m, _p, s, name in cloud.api.answers if m == "POST" and name.endswith("-cache")]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- saves at once ---------------------------------------------------------------------------


def test_two_saves_at_once_keep_each_others_entries(cloud: Cloud, tmp_path: Path) -> None:
    """Two replicas save at once on a first start, each with entries the other lacks. Both
    read MANIFEST.json (none yet) before either writes it: the fake holds the two writes until
    both have arrived. Cloud Storage keeps the last writer, so without a precondition the
    second write drops the first one's entries. With `ifGenerationMatch` (0: "must not exist")
    the second gets 412 Precondition Failed, reads and merges again: the manifest lists every
    entry of both, and a third node restores them all."""
    first, second = Node(tmp_path / "a", cloud), Node(tmp_path / "b", cloud)
    first.add(entries("a", 5))
    second.add(entries("b", 7))
    cloud.api.hold("MANIFEST.json", 2)
    cloud.api.hold("LATEST", 2)
    running = [first.start("save"), second.start("save")]
    for proc in running:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert first.summary()["ok"] and second.summary()["ok"]
    assert sorted(cloud.api.statuses("POST", "MANIFEST.json")) == [200, 200, 412]
    files = cloud.manifest()
    assert set(files) == set(first.entries) | set(second.entries)
    for name, data in {**first.entries, **second.entries}.items():
        assert files[name]["sha256"] == sha(data)
    # LATEST: both read "none", one wrote; the other's 412 re-read it and found its own.
    assert sorted(cloud.api.statuses("POST", "LATEST")) == [200, 412]
    assert cloud.latest() == GENERATION.encode()
    result = restore(cloud, tmp_path / "c")
    assert result["restored"] is True and result["files"] == 12, result
    assert "reason" not in result


def test_two_first_starts_of_the_same_programs_leave_a_manifest_true_to_its_objects(
    cloud: Cloud, tmp_path: Path
) -> None:
    """Two replicas compile the same programs: the same entry names, other bytes (JAX puts the
    compile time at the head of each entry, jax/_src/compilation_cache.py
    `combine_executable_and_time`). Each entry is written once (`ifGenerationMatch=0`: the
    second writer's 412 keeps the first object; an object the other save wrote moments ago is
    left to it), and the manifest records, for every name, the bytes its object holds: a third
    node drops nothing."""
    names = list(entries("same", 6))
    first, second = Node(tmp_path / "a", cloud), Node(tmp_path / "b", cloud)
    first.add({n: os.urandom(4000) for n in names})
    second.add({n: os.urandom(4000) for n in names})
    running = [first.start("save", workers=2), second.start("save", workers=2)]
    for proc in running:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    objects = cloud.objects()
    files = cloud.manifest()
    assert set(files) == set(names) == set(objects)
    for name in names:
        assert files[name]["sha256"] == sha(objects[name]), name
        assert objects[name] in (first.entries[name], second.entries[name])
    uploads = entry_uploads(cloud)
    assert uploads.count(200) == len(names)  # each name written once; the rest were 412
    result = restore(cloud, tmp_path / "c")
    assert result["restored"] is True and result["files"] == len(names), result
    assert "reason" not in result


# --- a corrupt entry is put back ----------------------------------------------------------------


def test_an_entry_dropped_as_corrupt_is_uploaded_again_by_the_next_save_that_has_it(
    cloud: Cloud, tmp_path: Path
) -> None:
    """An object no longer holds the bytes the manifest records (a restore drops it and the
    node compiles it again). The next save from a node that has the entry (here the one that
    made it, unchanged since) compares the listing with the manifest, rewrites that object on
    the condition that it is still the corrupt one, and the next restore is complete."""
    node = Node(tmp_path / "a", cloud)
    node.add(entries("x", 4))
    code, summary, err = node.save()
    assert code == 0 and summary["uploaded"] == 4, err
    victim = sorted(node.entries)[1]
    path = Path(cloud.store.root) / BUCKET / KEY / GENERATION / victim
    path.write_bytes(b"garbage" + path.read_bytes()[7:])
    broken = restore(cloud, tmp_path / "b")
    assert broken["reason"] == "1 corrupt or missing entries dropped", broken

    code, summary, err = node.save()
    assert code == 0 and summary["uploaded"] == 1, err
    assert cloud.store.get(BUCKET, f"{KEY}{GENERATION}/{victim}") == node.entries[victim]
    result = restore(cloud, tmp_path / "c")
    assert result["restored"] is True and result["files"] == 4 and "reason" not in result


def test_an_old_entry_no_manifest_records_is_replaced_and_a_young_one_left_alone(
    cloud: Cloud, tmp_path: Path
) -> None:
    """A save that broke after its uploads, before its manifest, leaves objects no manifest
    vouches for. Older than any save runs, such an object is replaced (on its listed
    generation) by a save with other bytes for that entry, and recorded; one with our bytes is
    just recorded. A young one is most likely another save's still under way: left as it is
    and not recorded by this save (that one's manifest will)."""
    old, ours, young = list(entries("o", 3))
    key = f"{KEY}{GENERATION}/"
    node = Node(tmp_path / "a", cloud)
    node.add({name: os.urandom(3000) for name in (old, ours, young)})
    cloud.store.put(BUCKET, key + old, b"orphan" * 500, mtime=OLD)
    cloud.store.backdate(BUCKET, key + old, 3600)
    cloud.store.put(BUCKET, key + ours, node.entries[ours], mtime=OLD)
    cloud.store.put(BUCKET, key + young, b"in flight" * 300, mtime=OLD)
    code, summary, err = node.save()
    assert code == 0 and summary["uploaded"] == 1, err
    assert set(cloud.manifest()) == {old, ours}
    objects = cloud.objects()
    assert objects[old] == node.entries[old] and objects[ours] == node.entries[ours]
    assert objects[young] == b"in flight" * 300


# --- the upload pool ---------------------------------------------------------------------------


def test_uploads_overlap_within_the_pool_bound_and_report_their_rate(
    cloud: Cloud, tmp_path: Path
) -> None:
    """With a round trip per request, more than one upload is in flight, never more than the
    pool (TPU_VLLM_CACHE_WORKERS); every entry arrives with its bytes, mtime and custom time,
    and the summary and the log give the upload's MB/s."""
    cloud.api.latency = 0.1
    node = Node(tmp_path / "a", cloud)
    node.add(entries("p", 20, size=200_000))
    code, summary, err = node.save(workers=4)
    assert code == 0, err
    assert 1 < cloud.api.max_uploads_in_flight <= 4
    assert summary["uploaded"] == 20 and summary["mb_per_s"] > 0
    assert "uploading 20 objects" in err and "4 at a time" in err
    assert "uploaded 20 objects" in err and "MB/s" in err
    assert cloud.objects() == node.entries
    for name in node.entries:
        meta = cloud.store.meta(BUCKET, f"{KEY}{GENERATION}/{name}")
        assert meta["mtime"] == OLD and meta.get("customTime")


def test_a_failing_upload_fails_the_save_and_leaves_latest_where_it_was(
    cloud: Cloud, tmp_path: Path
) -> None:
    """One entry's upload answers 503: the save fails (exit 1, `ok: false`), the entries not
    started yet are not sent, and neither MANIFEST.json nor LATEST is written, so the next node
    never prefetches a generation that is not complete. The failing upload is tried once
    (`TPU_VLLM_CACHE_RETRY_SECONDS` 0): this is about what a failure stops, not about the
    retries before it (tests/loopback/test_xla_cache_retry.py), which would let the other worker
    send the rest meanwhile on a loaded machine."""
    cloud.api.latency = 0.05
    cloud.env["TPU_VLLM_CACHE_RETRY_SECONDS"] = "0"
    node = Node(tmp_path / "a", cloud)
    node.add(entries("f", 24, size=50_000))
    failing = sorted(node.entries)[1]
    cloud.store.set_fault("put", fail="backendError: unavailable", match=failing)
    code, summary, err = node.save(workers=2)
    assert code == 1 and summary["ok"] is False, err
    assert f"{failing}: HTTP 503" in summary["error"]
    assert len(entry_uploads(cloud)) < 24
    assert cloud.latest() is None
    assert not cloud.store.exists(BUCKET, f"{KEY}{GENERATION}/MANIFEST.json")


# --- saves after the one at ready --------------------------------------------------------------


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_the_watcher_saves_again_later_and_on_sigterm(cloud: Cloud, tmp_path: Path) -> None:
    """`watch` saves at once (moving LATEST), then every `--every` seconds: an entry JAX wrote
    after that first save (a request's new shape) is in the bucket by the next one. SIGTERM
    (a pod's deletion, a VM's shutdown) ends the wait and makes a last save, which carries an
    entry written just before; then the watcher exits 0."""
    node = Node(tmp_path / "a", cloud)
    node.add(entries("w", 3))
    proc = node.start("watch", "--every", "2", "--stop-timeout", "20")
    try:
        wait_for(lambda: node.summary().get("why") == "ready", 60, "the save after ready")
        assert node.summary()["uploaded"] == 3 and cloud.latest() == GENERATION.encode()
        later = entries("later", 1)
        node.add(later)
        wait_for(
            lambda: node.summary().get("why") == "periodic" and set(later) <= set(cloud.manifest()),
            30,
            "a later save of the new entry",
        )
        last = entries("last", 1)
        node.add(last)
        time.sleep(1.2)  # complete, older than the settle pause
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "SIGTERM: saving what is new one last time" in err
    assert node.summary()["why"] == "SIGTERM" and node.summary()["ok"]
    assert set(cloud.manifest()) == set(node.entries)
    assert cloud.objects() == node.entries


def test_one_watcher_per_container(cloud: Cloud, tmp_path: Path) -> None:
    """The readiness command may run again for the same container: a second watcher leaves
    the saving to the first instead of doubling every save."""
    node = Node(tmp_path / "a", cloud)
    node.add(entries("one", 1))
    first = node.start("watch", "--every", "3600")
    try:
        wait_for(lambda: node.summary().get("why") == "ready", 60, "the first watcher's save")
        second = node.start("watch", "--every", "3600")
        _, err = second.communicate(timeout=30)
        assert second.returncode == 0
        assert "another watcher already saves for pod" in err
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)


def test_when_the_save_at_ready_fails_the_next_one_moves_latest(
    cloud: Cloud, tmp_path: Path
) -> None:
    """Later saves leave LATEST to the start that owns it, but the save at ready is the one
    that points it here: if that one fails (the bucket refuses LATEST for a moment), the next
    save that succeeds does it instead."""
    cloud.store.put(BUCKET, f"{KEY}LATEST", b"img-olderimage000")
    cloud.store.set_fault("put", fail="backendError: unavailable", match="LATEST")
    node = Node(tmp_path / "a", cloud)
    node.add(entries("l", 2))
    proc = node.start("watch", "--every", "1")
    try:
        wait_for(lambda: node.summary().get("why") == "ready", 60, "the save at ready")
        assert node.summary()["ok"] is False and cloud.latest() == b"img-olderimage000"
        cloud.store.clear_faults()
        wait_for(
            lambda: cloud.latest() == GENERATION.encode() and node.summary()["ok"],
            30,
            "LATEST moved by a later save",
        )
        assert node.summary()["why"] == "periodic"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
