"""The save: upload what the bucket lacks, merge MANIFEST.json, move LATEST, renew custom times.

Several saves may run at once on one generation and Cloud Storage keeps the last writer, so
every write is conditional on the generation it was based on (`ifGenerationMatch`). Which
write on which condition: docs/compile-cache.md "Concurrent saves".
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from xla_cache_api import JsonApi, PreconditionFailed
from xla_cache_base import (
    DEFAULT_SAVE_TIMEOUT,
    LATEST,
    MANIFEST,
    SETTLE_SECONDS,
    Deadline,
    file_digests,
    local_files,
    log,
    now_rfc3339,
    rfc3339_seconds,
)
from xla_cache_pool import TOUCH, UPLOAD, Progress, Stop, run_pool

#: An unrecorded object younger than any save runs may be another save's still under way.
ORPHAN_SECONDS = DEFAULT_SAVE_TIMEOUT


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str
    md5: str
    mtime: int

    def record(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "md5": self.md5}

    def held_by(self, item: dict[str, Any] | None) -> bool:
        return item is not None and _size(item) == self.size and item.get("md5Hash") == self.md5


def _size(item: dict[str, Any]) -> int:
    try:
        return int(item.get("size", -1))
    except (TypeError, ValueError):
        return -1


def record_holds(record: Any, item: dict[str, Any] | None) -> bool:
    return (
        isinstance(record, dict)
        and item is not None
        and bool(record.get("md5"))
        and record.get("md5") == item.get("md5Hash")
        and str(record.get("size")) == str(item.get("size"))
    )


class Scanner:
    """Kept for a watcher's life, so an unchanged file (size and mtime) is not hashed again."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._known: dict[str, tuple[int, int, Entry]] = {}

    def scan(self, settle: float = SETTLE_SECONDS) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        for rel, path in local_files(self.root, settle).items():
            try:
                info = os.stat(path)
            except OSError:
                continue
            known = self._known.get(path)
            if known is not None and known[:2] == (info.st_size, info.st_mtime_ns):
                found[rel] = known[2]
                continue
            try:
                size, sha, md5 = file_digests(path)
            except OSError:
                continue
            entry = Entry(path, size, sha, md5, int(info.st_mtime))
            self._known[path] = (info.st_size, info.st_mtime_ns, entry)
            found[rel] = entry
        return found


def manifest_files(raw: bytes | None) -> dict[str, Any]:
    try:
        files = json.loads(raw).get("files", {}) if raw else {}
    except (ValueError, AttributeError):
        return {}
    return dict(files) if isinstance(files, dict) else {}


def plan(
    local: dict[str, Entry],
    listing: dict[str, dict[str, Any]],
    files: dict[str, Any],
    now: float | None = None,
) -> list[tuple[str, Entry, int]]:
    """(entry, its file, the generation its write is conditional on) for each entry to send:
    0 where the bucket has none; the listed generation where the object holds bytes no record
    vouches for (dropped as corrupt) or is an orphan older than ORPHAN_SECONDS. Another save's
    object of the same program, with its own record, is as valid as ours."""
    now = time.time() if now is None else now
    todo: list[tuple[str, Entry, int]] = []
    for rel, entry in sorted(local.items()):
        item = listing.get(rel)
        if item is None:
            todo.append((rel, entry, 0))
            continue
        record = files.get(rel)
        if entry.held_by(item) or record_holds(record, item):
            continue
        written = rfc3339_seconds(str(item.get("timeCreated") or "")) or 0.0
        if record is None and now - written < ORPHAN_SECONDS:
            continue
        todo.append((rel, entry, int(item.get("generation") or 0)))
    return todo


def upload(
    api: JsonApi, url: str, todo: list[tuple[str, Entry, int]], deadline: Deadline, stamp: str
) -> tuple[list[str], list[str], float]:
    """(written, taken by another save meanwhile (412), MB/s)."""
    progress = Progress(url, len(todo), sum(e.size for _, e, _ in todo), UPLOAD)
    workers = max(1, min(api.workers, len(todo)))
    log(
        f"uploading {len(todo)} objects ({progress.total_bytes / 1e6:.1f} MB) to {url} via "
        f"the JSON API, {workers} at a time"
    )
    stop = Stop()

    def one(rel: str, entry: Entry, generation: int) -> Any:
        def call() -> str:
            if stop.is_set():
                return "stopped"
            try:
                api.write(
                    url + rel, entry.path, deadline, stamp, entry.mtime,
                    if_generation_match=generation, progress=progress, stop=stop,
                )  # fmt: skip
            except PreconditionFailed:
                progress.done(entry.size, kept=True)
                return "taken"
            progress.done(entry.size)
            return "written"

        return call

    outcomes = run_pool(
        [one(*task) for task in todo], workers=workers, deadline=deadline,
        what=f"upload to {url}", progress=progress, stop=stop, name="xla-cache-put",
    )  # fmt: skip
    # Not zip(strict=...): the node may run Python 3.9.
    written = [todo[i][0] for i, done in enumerate(outcomes) if done == "written"]
    taken = [todo[i][0] for i, done in enumerate(outcomes) if done == "taken"]
    if taken:
        log(f"{len(taken)} entries were written meanwhile by another save (412); kept theirs")
    return written, taken, progress.rate()


def merge_manifest(
    api: JsonApi, url: str, local: dict[str, Entry], deadline: Deadline, stamp: str
) -> tuple[dict[str, Any], bool, int]:
    """(the merged files, whether it was written, 412s met)."""
    conflicts = 0
    while True:
        raw, generation = api.read_generation(url + MANIFEST, deadline)
        files = manifest_files(raw)
        listing = api.list(url, deadline)  # after the read ("Concurrent saves")
        merged = {
            rel: record
            for rel, record in files.items()
            if rel in listing and (not record.get("md5") or record_holds(record, listing[rel]))
        }
        merged.update(
            {rel: entry.record() for rel, entry in local.items() if entry.held_by(listing.get(rel))}
        )
        if merged == files and (generation or not merged):
            return merged, False, conflicts
        body = json.dumps({"files": merged}, sort_keys=True).encode()
        try:
            api.write(url + MANIFEST, body, deadline, stamp, if_generation_match=generation)
            return merged, True, conflicts
        except PreconditionFailed:
            conflicts += 1
            log(
                f"{MANIFEST} changed since it was read (412 Precondition Failed: another save "
                f"wrote it); reading it again to merge (conflict {conflicts})"
            )
            time.sleep(min(random.uniform(0.05, 0.25) * conflicts, max(deadline.left(), 0.0)))  # noqa: S311
            deadline.check(f"write {url}{MANIFEST}")


def update_latest(
    api: JsonApi, prefix: str, generation: str, deadline: Deadline, stamp: str, *, move: bool
) -> str:
    """Point LATEST at `generation` (without `move` only if unset); what it names afterwards."""
    while True:
        raw, version = api.read_generation(prefix + LATEST, deadline)
        current = raw.decode(errors="replace").strip() if raw is not None else ""
        if current == generation or (current and not move):
            return current
        try:
            api.write(
                prefix + LATEST, generation.encode(), deadline, stamp, if_generation_match=version
            )
            return generation
        except PreconditionFailed:
            log(f"{LATEST} changed since it was read (412); reading it again")
            deadline.check(f"write {prefix}{LATEST}")


def touch(api: JsonApi, url: str, prefix: str, deadline: Deadline, stamp: str) -> int:
    """Renew the custom times the lifecycle rule counts 30 days from; how many were renewed."""
    ours = rfc3339_seconds(stamp) or time.time()
    listing = {url + rel: item for rel, item in api.list(url, deadline).items()}
    latest = api.stat(prefix + LATEST, deadline)
    if latest is not None:
        listing[prefix + LATEST] = latest
    stale = [
        name
        for name, item in sorted(listing.items())
        if (rfc3339_seconds(str(item.get("customTime") or "")) or 0.0) < ours
    ]
    progress = Progress(url, len(stale), 0, TOUCH)
    stop = Stop()

    def one(name: str) -> Any:
        def call() -> None:
            api.set_custom_time(name, stamp, deadline)
            progress.done(0)

        return call

    run_pool(
        [one(name) for name in stale], workers=api.workers, deadline=deadline,
        what=f"touch {url}", progress=progress, stop=stop, name="xla-cache-touch",
    )  # fmt: skip
    return len(stale)


def save_once(
    api: JsonApi,
    state: dict[str, Any],
    scanner: Scanner,
    deadline: Deadline,
    *,
    move_latest: bool = True,
    renew: bool = True,
) -> dict[str, Any] | None:
    """Its summary, or None when there is nothing to save. Raises on a failure, LATEST unmoved."""
    started = time.time()
    url = f"{state['prefix']}{state['generation']}/"
    local = scanner.scan()
    if not local:
        log(f"the cache directory {state['dir']} is empty; nothing to save")
        return None
    stamp = now_rfc3339()
    files = manifest_files(api.read(url + MANIFEST, deadline))
    todo = plan(local, api.list(url, deadline), files)
    written: list[str] = []
    taken: list[str] = []
    rate = 0.0
    if todo:
        log(f"saving {len(todo)} new files to {url} via the JSON API")
        written, taken, rate = upload(api, url, todo, deadline, stamp)
    merged, wrote, conflicts = merge_manifest(api, url, local, deadline, stamp)
    latest = ""
    if merged:  # never point LATEST at a generation without a manifest
        latest = update_latest(
            api, state["prefix"], state["generation"], deadline, stamp, move=move_latest
        )
    renewed = touch(api, url, state["prefix"], deadline, stamp) if renew and merged else 0
    return {
        "ok": True,
        "uploaded": len(written),
        "bytes": sum(local[rel].size for rel in written),
        "mb_per_s": round(rate, 1),
        "taken": len(taken),
        "entries": len(merged),
        "manifest": "written" if wrote else "unchanged",
        "manifest_conflicts": conflicts,
        "latest": latest,
        "renewed": renewed,
        "seconds": round(time.time() - started, 1),
        "generation": url,
    }
