"""The compile cache's Cloud Storage calls ride out transient failures, as Google's Retry
strategy page says a client should (scripts/remote/xla_cache_retry.py): reads are tried again,
writes only with a generation precondition, two writes of one name are a second apart, and a
large entry goes up resumably and resumes where the service's Range says it stopped.

Against the loopback fake JSON API (tests/support/fakes/gcs_api.py), which injects 429, 503 and
reset connections with the service's error bodies (tests/support/fakes/gcs_faults.py) and serves
resumable sessions (tests/support/fakes/gcs_resumable.py). Backoff is made small (QUICK_RETRIES);
the one time bound asserted is the 1 s write spacing, a lower bound read from the fake's arrival
times.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.gcs_api import QUICK_RETRIES, FakeGcsApi
from tests.support.fakes.gcs_store import GcsStore
from tests.support.fakes.metadata_server import FakeMetadataServer
from tests.support.xla_cache_restore import Bucket, restore
from tests.support.xla_cache_save import GENERATION, KEY, Cloud, Node, entries
from tests.support.xla_cache_tool import load_tool

STAMP = "2026-01-02T03:04:05.000000Z"


@pytest.fixture
def api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_metadata: FakeMetadataServer
) -> Iterator[tuple[Any, FakeGcsApi, Any]]:
    """(the tool's JsonApi, the fake, the tool), in this process."""
    root = tmp_path / "gcs"
    GcsStore(str(root)).create_bucket("b")
    fake = FakeGcsApi(root, token=fake_metadata.access_token).start()
    monkeypatch.setenv("STORAGE_API_ENDPOINT", fake.url)
    monkeypatch.setenv("GCE_METADATA_HOST", fake_metadata.host)
    for name, value in QUICK_RETRIES.items():
        monkeypatch.setenv(name, value)
    tool = load_tool()
    try:
        yield tool.JsonApi(), fake, tool
    finally:
        fake.stop()


def posts_of(fake: FakeGcsApi, name: str) -> list[dict[str, Any]]:
    """The upload requests that wrote (or tried to write) the object `name`."""
    return [
        r for r in fake.requests
        if r["method"] == "POST" and r["path"].startswith("/upload/") and name.encode() in r["body"]
    ]  # fmt: skip


def test_a_restore_whose_gets_meet_503s_and_a_reset_still_restores_warm(
    bucket: Bucket,
    tmp_path: Path,
) -> None:
    """The listing meets a 503, one entry's download two 503s, another's a reset connection:
    each is tried again, and the node starts warm with every entry's bytes."""
    names = sorted(bucket.entries)
    bucket.api.inject("GET", "/storage/v1/b/b/o ", 503)  # the listing (no object name)
    bucket.api.inject("GET", names[2], 503, times=2)
    bucket.api.inject("GET", names[5], 0)  # reset, no answer
    result = restore(tmp_path)
    assert result["restored"] is True, result
    cache = tmp_path / "xla_cache"
    for name, data in bucket.entries.items():
        assert (cache / name).read_bytes() == data, name
    assert bucket.api.statuses("GET", names[2]) == [503, 503, 200]
    assert bucket.api.statuses("GET", names[5]) == [200]  # the reset one had no answer
    assert len([p for p in bucket.object_gets() if names[5] in p]) == 2


def test_a_manifest_write_that_meets_429_is_tried_again_a_second_later_and_lands(
    cloud: Cloud,
    tmp_path: Path,
) -> None:
    """Cloud Storage answers 429 to a name written faster than about once a second. The save's
    manifest write (conditional on its generation) is tried again no sooner than 1 s after the
    429, lands, and the save succeeds with LATEST moved."""
    cloud.api.inject("POST", "MANIFEST.json", 429)
    node = Node(tmp_path / "a", cloud)
    node.add(entries("m", 3))
    code, summary, err = node.save()
    assert code == 0 and summary["ok"] is True, err
    assert summary["manifest"] == "written"
    assert set(cloud.manifest()) == set(node.entries)
    assert cloud.latest() == GENERATION.encode()
    assert cloud.api.statuses("POST", "MANIFEST.json") == [429, 200]
    first, second = posts_of(cloud.api, f"{KEY}{GENERATION}/MANIFEST.json")
    assert second["time"] - first["time"] >= 1.0
    assert "rateLimitExceeded" in err or "HTTP 429" in err


def test_an_unconditional_write_is_not_tried_again(api: tuple[Any, FakeGcsApi, Any]) -> None:
    """A write without ifGenerationMatch could land twice: one 503 fails it, with one request
    sent. The same write with a precondition is tried again and lands."""
    client, fake, tool = api
    fake.inject("POST", "LATEST", 503)
    with pytest.raises(RuntimeError, match="HTTP 503"):
        client.write("gs://b/k/LATEST", b"img-1", tool.Deadline(30), STAMP)
    assert len(posts_of(fake, "k/LATEST")) == 1
    assert not fake.store.exists("b", "k/LATEST")

    fake.inject("POST", "j/LATEST", 503)
    client.write("gs://b/j/LATEST", b"img-1", tool.Deadline(30), STAMP, if_generation_match=0)
    assert fake.store.get("b", "j/LATEST") == b"img-1"
    assert fake.statuses("POST", "j/LATEST") == [503, 200]


def test_a_rewrite_after_a_412_waits_a_second(api: tuple[Any, FakeGcsApi, Any]) -> None:
    """A 412 means another writer has just written the name: the rewrite on the generation read
    again goes out no sooner than 1 s later (Cloud Storage's ~1 write/s per object)."""
    client, fake, tool = api
    fake.store.put("b", "k/MANIFEST.json", b"{}")
    with pytest.raises(tool.api.PreconditionFailed):
        client.write("gs://b/k/MANIFEST.json", b'{"files": {}}', tool.Deadline(30), STAMP,
                     if_generation_match=0)  # fmt: skip
    _raw, generation = client.read_generation("gs://b/k/MANIFEST.json", tool.Deadline(30))
    client.write("gs://b/k/MANIFEST.json", b'{"files": {}}', tool.Deadline(30), STAMP,
                 if_generation_match=generation)  # fmt: skip
    refused, written = posts_of(fake, "k/MANIFEST.json")
    assert written["time"] - refused["time"] >= 1.0
    assert fake.statuses("POST", "k/MANIFEST.json") == [412, 200]


def test_a_write_whose_answer_was_lost_is_not_taken_for_another_saves(
    api: tuple[Any, FakeGcsApi, Any],
) -> None:
    """The service writes the object, then the connection drops before the answer: the retry's
    412 is the first try's own write (the object holds these bytes), so the write succeeds. A
    412 after a 503 where the object holds other bytes is another writer's: PreconditionFailed."""
    client, fake, tool = api
    data = os.urandom(5000)
    fake.inject("POST", "k/a-cache", lose_answer=True)
    item = client.write("gs://b/k/a-cache", data, tool.Deadline(30), STAMP, if_generation_match=0)
    assert item["md5Hash"] == fake.store.meta("b", "k/a-cache")["md5Hash"]
    assert fake.store.get("b", "k/a-cache") == data
    assert fake.statuses("POST", "k/a-cache") == [412]  # the first try's answer never came

    fake.store.put("b", "k/b-cache", b"another save's bytes")
    fake.inject("POST", "k/b-cache", 503)
    with pytest.raises(tool.api.PreconditionFailed):
        client.write("gs://b/k/b-cache", data, tool.Deadline(30), STAMP, if_generation_match=0)
    assert fake.store.get("b", "k/b-cache") == b"another save's bytes"


def test_a_large_entry_goes_up_resumably_and_resumes_from_the_services_range(
    api: tuple[Any, FakeGcsApi, Any], tmp_path: Path
) -> None:
    """An entry over 8 MiB goes up in a resumable session; the connection is reset after 3 MiB
    of its bytes: the client asks the session's status (308, Range bytes=0-LAST) and sends only
    the rest, from LAST + 1, and the object holds the file's bytes with its metadata."""
    client, fake, tool = api
    size = (8 << 20) + 12345
    path = tmp_path / "big-cache"
    path.write_bytes(os.urandom(size))
    cut = 3 << 20
    fake.inject("PUT", "k/big-cache", after_bytes=cut)
    client.write("gs://b/k/big-cache", str(path), tool.Deadline(60), STAMP, 1_700_000_000,
                 if_generation_match=0)  # fmt: skip
    assert (
        hashlib.sha256(fake.store.get("b", "k/big-cache")).digest()
        == hashlib.sha256(path.read_bytes()).digest()
    )
    meta = fake.store.meta("b", "k/big-cache")
    assert meta["mtime"] == 1_700_000_000 and meta["customTime"] == STAMP
    opened = [r for r in fake.requests if r["method"] == "POST"]
    assert len(opened) == 1 and "uploadType=resumable" in opened[0]["path"]
    assert json.loads(opened[0]["body"])["name"] == "k/big-cache"
    ranges = [r["headers"]["content-range"] for r in fake.requests if r["method"] == "PUT"]
    assert ranges == [f"bytes 0-{size - 1}/{size}", f"bytes */{size}",
                      f"bytes {cut}-{size - 1}/{size}"]  # fmt: skip
    assert fake.statuses("PUT", "k/big-cache") == [308, 200]


def test_a_touch_that_meets_a_503_is_tried_again(api: tuple[Any, FakeGcsApi, Any]) -> None:
    """The save renews each kept entry's customTime with a PATCH; one 503 among them must not
    fail the save: setting one field to a fixed value lands the same when repeated."""
    client, fake, tool = api
    client.write("gs://b/k/a-cache", b"bytes", tool.Deadline(30), STAMP, if_generation_match=0)
    later = "2026-02-03T04:05:06.000000Z"
    fake.inject("PATCH", "k/a-cache", 503)
    client.set_custom_time("gs://b/k/a-cache", later, tool.Deadline(30))
    assert fake.statuses("PATCH", "k/a-cache") == [503, 200]
    assert fake.store.meta("b", "k/a-cache")["customTime"] == later


def test_a_tls_session_cut_short_is_transient_a_refused_certificate_is_not(
    api: tuple[Any, FakeGcsApi, Any],
) -> None:
    """An SSLEOFError is a TLS disconnect (python-storage retries urllib3's SSLError); a
    certificate the client refuses will be refused again."""
    import ssl

    module = __import__("xla_cache_retry")  # the tool's sibling, loaded by load_tool
    assert module.retryable(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"))
    assert not module.retryable(ssl.SSLCertVerificationError(1, "certificate verify failed"))


def test_a_resumable_session_uri_never_reaches_a_deadline_message(
    api: tuple[Any, FakeGcsApi, Any], tmp_path: Path
) -> None:
    """The session URI's upload_id acts as a credential for the upload (Cloud Storage docs,
    "Resumable uploads"): a deadline met mid-upload names the path, never the query."""
    client, fake, tool = api
    path = tmp_path / "big-cache"
    path.write_bytes(os.urandom((8 << 20) + 1))
    fake.inject("PUT", "k/big-cache", after_bytes=1 << 20)
    deadline = tool.Deadline(60)
    seen: list[str] = []
    check = deadline.check

    def spy(what: str) -> float:
        seen.append(what)
        return float(check(what))

    deadline.check = spy
    client.write("gs://b/k/big-cache", str(path), deadline, STAMP, if_generation_match=0)
    puts = [w for w in seen if w.startswith("PUT ")]
    assert puts, seen
    assert not any("upload_id" in w for w in seen), seen
