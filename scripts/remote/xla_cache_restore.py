"""The restore: fetch the pinned image's generation during the pull, then install it.

The image is pinned (`NAME@sha256:...`, components/image_pin.py), so the generation is known
before the pull and nothing asks docker or the kubelet which image came down. Any problem means
a cold start, never a failed one. Why and how: docs/compile-cache.md "Restore".
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

from xla_cache_base import (
    LATEST,
    MANIFEST,
    Deadline,
    file_sha256,
    generation_name,
    log,
    paths,
    read_json,
    write_json,
)
from xla_cache_gcloud import transport


def cmd_fetch(args: argparse.Namespace) -> int:
    """The pinned image's generation (else LATEST's), while the image is still being pulled."""
    p = paths(args.work)
    started = time.time()
    record: dict[str, Any] = {"started": started, "prefix": args.prefix, "candidate": ""}
    write_json(p["fetch"], record)
    deadline = Deadline(args.timeout, started)
    store = transport()
    try:
        pinned = pinned_digest(args.image) if getattr(args, "image", "") else ""
        raw = (
            generation_name(pinned).encode()
            if pinned
            else store.read(args.prefix + LATEST, deadline)
        )
        if raw is None:
            record["error"] = "no cache saved under this key yet"
            log(f"no generation under {args.prefix} yet (first start with this key)")
        else:
            candidate = raw.decode(errors="replace").strip()
            record["candidate"] = candidate
            log(f"fetching {args.prefix}{candidate}/ via {store.name}")
            staging = os.path.join(p["staging"], candidate)
            store.download(f"{args.prefix}{candidate}/", staging, deadline)
            if os.path.isdir(staging) and os.listdir(staging):
                record["fetched"] = True
            else:  # nothing under the pinned digest's generation: this image's first start
                record["error"] = f"no cache for this image under {args.prefix} yet"
                log(f"no generation {candidate} under {args.prefix} yet")
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        record["error"] = str(error)
        log(f"fetch failed ({error}); the start goes on")
    # The restore's budget counts the fetch's own time, not the pull alongside.
    record["seconds"] = round(time.time() - started, 3)
    write_json(p["fetch"], record)
    return 0


def pinned_digest(image: str) -> str:
    _, at, digest = image.rpartition("@")
    hexdigest = digest.partition(":")[2]
    if not at or not digest.startswith("sha256:") or len(hexdigest) != 64:
        raise ValueError(f"{image!r} is not pinned (NAME@sha256:<64 hex>)")
    if any(c not in "0123456789abcdef" for c in hexdigest):
        raise ValueError(f"{image!r} is not pinned (NAME@sha256:<64 hex>)")
    return digest


def verify(staging: str) -> tuple[dict[str, int], int, str]:
    """({path: size} of entries that match the manifest, entries dropped, problem or "")."""
    manifest = read_json(os.path.join(staging, MANIFEST)).get("files")
    if not isinstance(manifest, dict):
        return {}, 0, "the generation has no manifest (an interrupted save?)"
    good: dict[str, int] = {}
    dropped = 0
    for rel, entry in sorted(manifest.items()):
        path = os.path.join(staging, rel)
        try:
            ok = (
                os.path.getsize(path) == int(entry["size"]) and file_sha256(path) == entry["sha256"]
            )
        except (OSError, KeyError, TypeError, ValueError):
            ok = False
        if ok:
            good[rel] = int(entry["size"])
        else:
            dropped += 1
            with_path = os.path.exists(path)
            log(f"dropping {rel}: {'does not match the manifest' if with_path else 'missing'}")
            if with_path:
                os.unlink(path)  # fetched again next time
    return good, dropped, ""


def install(staging: str, good: dict[str, int], target: str) -> tuple[int, int]:
    """Copy verified entries into the cache directory; (files, bytes) now in place.

    Saved mtimes are kept, or the next save would send every file again (it compares size and
    mtime). Each entry gets a `-atime` stamp: JAX's eviction, which only the pulled image's
    environment could turn on, fails on a missing one (jax/_src/lru_cache.py).
    """
    files = size = 0
    stamp = time.time_ns().to_bytes(8, "little")
    for rel, nbytes in good.items():
        src, dest = os.path.join(staging, rel), os.path.join(target, rel)
        kept = os.stat(src)
        try:
            there = os.stat(dest)
            same = there.st_size == nbytes and there.st_mtime_ns == kept.st_mtime_ns
        except OSError:
            same = False
        if not same:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(src, dest + ".restore.tmp")
            os.utime(dest + ".restore.tmp", ns=(kept.st_atime_ns, kept.st_mtime_ns))
            os.replace(dest + ".restore.tmp", dest)
        atime = dest[: -len("-cache")] + "-atime"
        if rel.endswith("-cache") and not os.path.exists(atime):
            with open(atime + ".restore.tmp", "wb") as handle:
                handle.write(stamp)
            os.replace(atime + ".restore.tmp", atime)
        files += 1
        size += nbytes
    return files, size


def unwritable(target: str) -> str:
    """Why the install cannot write into `target` ("" when it can)."""
    folder = target
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.access(folder, os.W_OK | os.X_OK):
        return ""
    owner = os.stat(folder).st_uid
    return (
        f"cannot write to {folder} (owned by uid {owner}, this is uid {os.getuid()}): the "
        "server runs as root and JAX creates the directory itself; the start script hands it "
        "back with `sudo chown` first"
    )


def cmd_install(args: argparse.Namespace) -> int:
    """Keep the fetched generation only if it is the pinned image's; install it."""
    p = paths(args.work)
    fetched = read_json(p["fetch"])
    began = time.time()
    if "seconds" in fetched:
        fetch_seconds = float(fetched["seconds"])
    else:  # no fetch ran, or it died: count from its start, if any, to stay bounded
        fetch_seconds = began - float(fetched.get("started") or began)
    deadline = Deadline(max(args.timeout - fetch_seconds, 0.0), began)
    result: dict[str, Any] = {"restored": False, "files": 0, "bytes": 0, "generation": ""}
    target = os.path.expanduser(args.dir)
    # A previous start's state (another key or image) must not survive a failure below.
    write_json(p["state"], {})
    try:
        digest = pinned_digest(args.image)
        generation = generation_name(digest)
        url = f"{args.prefix}{generation}/"
        result["generation"] = url
        write_json(
            p["state"],
            {"prefix": args.prefix, "generation": generation, "dir": target, "digest": digest},
        )
        staging = os.path.join(p["staging"], generation)
        for old in os.listdir(p["staging"]) if os.path.isdir(p["staging"]) else []:
            if old != generation:
                shutil.rmtree(os.path.join(p["staging"], old), ignore_errors=True)
        candidate = str(fetched.get("candidate") or "")
        if candidate != generation or not fetched.get("fetched"):
            if candidate and candidate != generation:
                log(
                    f"the fetched generation ({candidate}) was made with another image; "
                    f"not using it. Looking for {generation} ({digest})"
                )
            if store_has_generation(url, deadline):
                transport().download(url, staging, deadline)
            else:
                result["reason"] = f"no cache for this image under {args.prefix} yet"
        if "reason" not in result:
            good, dropped, problem = verify(staging)
            if problem:
                result["reason"] = problem
                shutil.rmtree(staging, ignore_errors=True)
            elif not good:
                result["reason"] = f"all {dropped} entries were corrupt or missing"
            elif unwritable(target):
                result["reason"] = unwritable(target)
            else:
                os.makedirs(target, exist_ok=True)
                files, size = install(staging, good, target)
                result.update(restored=True, files=files, bytes=size)
                if dropped:
                    result["reason"] = f"{dropped} corrupt or missing entries dropped"
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        result["reason"] = f"restore failed: {error}"
    result["seconds"] = round(fetch_seconds + time.time() - began, 1)
    if result["restored"]:
        log(
            f"restored {result['files']} files ({result['bytes']} bytes) from "
            f"{result['generation']} in {result['seconds']}s"
            + (f"; {result['reason']}" if result.get("reason") else "")
        )
    else:
        log(f"not restored ({result.get('reason', '')}); this start compiles cold")
    write_json(p["result"], result)
    return 0


def store_has_generation(url: str, deadline: Deadline) -> bool:
    return transport().read(url + MANIFEST, deadline) is not None


def cmd_off(args: argparse.Namespace) -> int:
    p = paths(args.work)
    write_json(p["state"], {})
    write_json(
        p["result"],
        {"restored": False, "files": 0, "bytes": 0, "seconds": 0.0, "generation": "",
         "reason": "disabled (tpu-vllm:cache.enabled is false)"},
    )  # fmt: skip
    return 0
