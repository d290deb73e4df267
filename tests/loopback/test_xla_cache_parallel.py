"""The node tool's JSON API restore downloads in parallel, with every guarantee it had serially.

The tool (scripts/remote/xla_cache.py) runs `fetch` then `install`, as the GKE init container
does (`--in-pod`, the image named by digest: no docker), against the loopback fake of the Cloud
Storage JSON API (tests/support/fakes/gcs_api.py) and the metadata server. The fake counts the
object downloads it serves at once and can answer each request after a delay (a Cloud Storage round
trip), which is what makes the overlap visible. No timing is asserted beyond the restore's own
bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.xla_cache_restore import BUCKET, MTIME, PREFIX, SIZES, Bucket, restore
from tests.support.xla_cache_tool import TOOL, load_tool


def test_downloads_overlap_within_the_pool_bound(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a round trip per request, more than one download is in flight, never more than the
    pool; and the restore is the serial one's: every entry, its bytes, its saved mtime."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "4")
    bucket.api.latency = 0.1
    result = restore(tmp_path)
    assert result["restored"] is True, result
    assert result["files"] == len(bucket.entries) and "reason" not in result
    assert 1 < bucket.api.max_media_in_flight <= 4
    assert len(bucket.object_gets()) == len(bucket.entries)  # each entry fetched once
    cache = tmp_path / "xla_cache"
    for name, data in bucket.entries.items():
        assert (cache / name).read_bytes() == data
        assert (cache / name).stat().st_mtime == MTIME  # goog-reserved-file-mtime
    staging = tmp_path / "work" / "staging"
    assert not list(staging.rglob("*.part"))


def test_one_worker_downloads_one_at_a_time(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "1")
    bucket.api.latency = 0.02
    result = restore(tmp_path)
    assert result["restored"] is True and result["files"] == len(bucket.entries)
    assert bucket.api.max_media_in_flight == 1


def test_the_default_pool_is_bounded(
    bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = load_tool()
    bucket.api.latency = 0.05
    result = restore(tmp_path, tool=tool)
    assert result["restored"] is True, result
    assert 1 < bucket.api.max_media_in_flight <= tool.DEFAULT_WORKERS
    assert f"{tool.DEFAULT_WORKERS} at a time" in capsys.readouterr().err


def test_a_bad_pool_size_falls_back_to_the_default_and_says_so(
    bucket: Bucket,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "zero")
    tool = load_tool()
    result = restore(tmp_path, tool=tool)
    assert result["restored"] is True, result
    err = capsys.readouterr().err
    assert "TPU_VLLM_CACHE_WORKERS='zero' is not a whole number from 1 to 64" in err
    assert f"{tool.DEFAULT_WORKERS} at a time" in err


def test_progress_is_logged_while_the_download_runs(
    bucket: Bucket,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "2")
    bucket.api.latency = 0.1
    tool = load_tool()
    tool.pool.PROGRESS_SECONDS = 0.2  # the real pause is 10 s
    result = restore(tmp_path, tool=tool)
    assert result["restored"] is True
    err = capsys.readouterr().err
    total = len(bucket.entries) + 1  # and the manifest
    size = sum(SIZES) + len(bucket.store.get(BUCKET, bucket.key("MANIFEST.json")))
    assert f"downloading {total} objects ({size / 1e6:.1f} MB)" in err
    assert f"of {total} objects, " in err  # a progress line, while it ran
    assert f"downloaded {total} objects ({size / 1e6:.1f} MB)" in err
    assert "MB/s" in err


def test_a_corrupt_entry_is_dropped_and_the_others_kept(
    bucket: Bucket,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An object whose bytes no longer match the manifest: dropped (and logged) by the manifest
    check after the parallel download, as after the serial one; the rest is installed."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "4")
    bucket.api.latency = 0.02
    victim = sorted(bucket.entries)[5]
    path = Path(bucket.store.root) / BUCKET / bucket.key(victim)
    path.write_bytes(b"garbage" + path.read_bytes()[7:])
    result = restore(tmp_path)
    assert result["restored"] is True, result
    assert result["files"] == len(bucket.entries) - 1
    assert result["reason"] == "1 corrupt or missing entries dropped"
    assert f"dropping {victim}: does not match the manifest" in capsys.readouterr().err
    cache = tmp_path / "xla_cache"
    assert not (cache / victim).exists()
    kept = sorted(set(bucket.entries) - {victim})
    stamps = sorted(n.replace("-cache", "-atime") for n in kept if n.endswith("-cache"))
    assert sorted(p.name for p in cache.iterdir()) == sorted(kept + stamps)


def test_a_failed_object_abandons_the_restore_and_starts_no_more(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One object answers 503 however often it is tried: once its retries run out the download
    fails as the serial one did (the restore starts cold, naming the object), the objects not
    started yet are never requested, and no partial file is left behind. Tried once here
    (`TPU_VLLM_CACHE_RETRY_SECONDS` 0): the retries are tests/loopback/test_xla_cache_retry.py's,
    and on a loaded machine the other worker would fetch the rest while they run."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "2")
    monkeypatch.setenv("TPU_VLLM_CACHE_RETRY_SECONDS", "0")
    bucket.api.latency = 0.05
    largest = max(bucket.entries, key=lambda n: len(bucket.entries[n]))  # among the first sent
    bucket.store.set_fault("read", fail="backendError: unavailable", match=largest)
    work = tmp_path / "work"
    fetch = ["fetch", "--work", str(work), "--prefix", PREFIX, "--timeout", "60"]
    assert load_tool().main(fetch) == 0
    fetched = json.loads((work / "fetch.json").read_text())
    assert "fetched" not in fetched
    assert fetched["error"] == f"download gs://{BUCKET}/{bucket.key(largest)}: HTTP 503"
    assert len(set(bucket.object_gets())) < len(bucket.entries) // 2
    assert not list((work / "staging").rglob("*.part"))

    result = restore(tmp_path)  # the install tries once more, and fails alike
    assert result["restored"] is False
    assert result["reason"] == (
        f"restore failed: download gs://{BUCKET}/{bucket.key(largest)}: HTTP 503"
    )
    assert not (tmp_path / "xla_cache").exists()


def test_a_stalled_object_is_cut_off_at_the_restore_bound(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One object that never answers (within 30 s): the restore's bound (cache.restoreTimeout,
    here 3 s) still holds with the other workers busy, and the start goes on cold."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "4")
    victim = sorted(bucket.entries)[3]
    bucket.store.set_fault("read", delay=30, match=victim)
    began = time.monotonic()
    result = restore(tmp_path, timeout=3)
    assert time.monotonic() - began < 15  # the bound, not the 30 s stall
    assert result["restored"] is False
    assert "out of time" in result["reason"] or "timed out" in result["reason"], result
    assert result["seconds"] <= 6, result


def fetch_process(work: Path, timeout: float) -> tuple[float, dict[str, Any]]:
    """`fetch` as cache_restore.sh runs it, a process of its own (`wait "$cache_fetch"` waits
    for that process to exit, worker threads included): (its wall time, fetch.json)."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(TOOL), "fetch", "--work", str(work), "--prefix", PREFIX,
         "--timeout", str(timeout)],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    return wall, dict(json.loads((work / "fetch.json").read_text()))


def test_a_body_that_trickles_then_stalls_ends_the_fetch_at_its_bound(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object answers, sends half its body a little at a time until just before the bound,
    then falls silent for 30 s: each read's socket timeout is aimed at the bound (not fixed when
    the request opened, up to 120 s), so the process exits at the bound, and fetch.json's
    `seconds` counts all of it. Margins are generous: no timing beyond the bound is asserted."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "4")
    bound = 8.0
    victim = sorted(bucket.entries)[3]
    bucket.api.break_body(victim, len(bucket.entries[victim]) // 2, trickle=bound - 2, stall=30)
    wall, fetched = fetch_process(tmp_path / "work", bound)
    assert "fetched" not in fetched
    assert fetched["error"] == f"download {PREFIX}{bucket.generation}/: out of time", fetched
    assert wall < bound + 4  # the bound, not the stall nor a socket timeout set at the start
    assert fetched["seconds"] >= wall - 3  # the fetch's own time is all of the process's
    assert not list((tmp_path / "work" / "staging").rglob("*.part"))


def test_a_failed_object_stops_a_stalled_one_at_once(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers: the largest object stalls mid-body; the other worker downloads the next one,
    then gets 503 for the third. The stalled worker's socket is shut down, so the fetch ends
    long before its bound (here 20 s) and the 30 s stall, and fetch.json's `seconds` still
    counts all of it."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "2")
    bucket.api.latency = 0.5  # a round trip: the stalled body is under way before the 503
    stalled, _, failing = sorted(bucket.entries, key=lambda n: -len(bucket.entries[n]))[:3]
    bucket.api.break_body(stalled, 1000, stall=30)
    bucket.store.set_fault("read", fail="backendError: unavailable", match=failing)
    wall, fetched = fetch_process(tmp_path / "work", 20)
    assert fetched["error"] == f"download gs://{BUCKET}/{bucket.key(failing)}: HTTP 503", fetched
    assert wall < 10
    assert fetched["seconds"] >= wall - 3


def test_a_body_cut_short_is_not_taken_for_a_whole_one(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection closes after part of the declared Content-Length: http.client reports
    only an end of stream, so the tool counts the bytes; the restore starts cold, naming the
    object and the shortfall, and no truncated file is left as if whole."""
    monkeypatch.setenv("TPU_VLLM_CACHE_WORKERS", "4")
    victim = sorted(bucket.entries)[4]
    size = len(bucket.entries[victim])
    bucket.api.break_body(victim, size // 3)
    work = tmp_path / "work"
    fetch = ["fetch", "--work", str(work), "--prefix", PREFIX, "--timeout", "60"]
    assert load_tool().main(fetch) == 0
    fetched = json.loads((work / "fetch.json").read_text())
    short = f"download gs://{BUCKET}/{bucket.key(victim)}: short read {size // 3} of {size} bytes"
    assert "fetched" not in fetched and fetched["error"] == short, fetched
    staging = work / "staging" / bucket.generation
    assert not (staging / victim).exists() and not list(staging.rglob("*.part"))

    result = restore(tmp_path)  # the install tries once more, and fails alike
    assert result["restored"] is False
    assert result["reason"] == f"restore failed: {short}"
