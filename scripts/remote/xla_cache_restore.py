"""The restore: fetch the newest generation during the pull, then install the image's own
(scripts/remote/xla_cache.py `fetch`, `install`, `off`).

A generation without a manifest is an interrupted save and is not restored; files that do not
match the manifest (corrupt, partial) are dropped and logged (the next save that has them
uploads them again). Only the generation of the digest that is about to run is ever installed.
Any problem means a cold start, never a failed one: each command logs it and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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

#: JAX's eviction setting (jax/_src/config.py `jax_compilation_cache_max_size`, read from this
#: variable; default -1 = no eviction, and then JAX neither writes nor reads `-atime` stamps).
JAX_MAX_SIZE_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download the newest generation (LATEST) while the image is still being pulled."""
    p = paths(args.work)
    started = time.time()
    record: dict[str, Any] = {"started": started, "prefix": args.prefix, "candidate": ""}
    write_json(p["fetch"], record)
    deadline = Deadline(args.timeout, started)
    store = transport()
    try:
        raw = store.read(args.prefix + LATEST, deadline)
        if raw is None:
            record["error"] = "no cache saved under this key yet"
            log(f"no generation under {args.prefix} yet (first start with this key)")
        else:
            candidate = raw.decode(errors="replace").strip()
            record["candidate"] = candidate
            log(f"fetching {args.prefix}{candidate}/ via {store.name}")
            store.download(
                f"{args.prefix}{candidate}/", os.path.join(p["staging"], candidate), deadline
            )
            record["fetched"] = True
    except Exception as error:  # noqa: BLE001 - any failure means a cold start, never a failure
        record["error"] = str(error)
        log(f"fetch failed ({error}); the start goes on")
    # The fetch's own time: the restore's share of the budget (the pull runs alongside).
    record["seconds"] = round(time.time() - started, 3)
    write_json(p["fetch"], record)
    return 0


class Image:
    """What the restore needs to know about the image about to run."""

    def __init__(self, digest: str, env: dict[str, str]) -> None:
        self.digest = digest  # "" when unknown
        self.env = env  # its environment (ENV), where JAX reads its settings from


def inspect_image(image: str, in_pod: bool) -> Image:
    """The image's registry digest (`repo@sha256:...`, else its local id) and environment.

    On a VM: `sudo docker image inspect` (RepoDigests, Config.Env). In a pod there is no docker
    (never call it there): the init container runs in the server's image, so its own
    environment is the image's, and the digest is the one the kubelet published in the pod's
    status (`imageID`, scripts/remote/pod_image.py), passed as `--image`, or none at all.
    """
    if in_pod:
        return Image(image if "@sha256:" in image else "", dict(os.environ))
    done = subprocess.run(
        ["sudo", "docker", "image", "inspect", image],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        return Image(image if "@sha256:" in image else "", {})
    try:
        data = json.loads(done.stdout)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        data = {}
    env = dict(
        str(e).split("=", 1) for e in (data.get("Config") or {}).get("Env") or [] if "=" in str(e)
    )
    if "@sha256:" in image:
        return Image(image, env)
    digests = [str(d) for d in data.get("RepoDigests") or []]
    return Image(sorted(digests)[0] if digests else str(data.get("Id") or ""), env)


def eviction_configured(env: dict[str, str]) -> bool:
    """JAX evicts (and keeps `-atime` stamps) only when its max size is not -1, the default
    (jax/_src/compilation_cache.py `get_file_cache` -> LRUCache `eviction_enabled`)."""
    return env.get(JAX_MAX_SIZE_ENV, "-1").strip() not in ("", "-1")


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


def install(
    staging: str, good: dict[str, int], target: str, stamps: bool = False
) -> tuple[int, int]:
    """Copy verified entries into the cache directory; (files, bytes) now in place.

    Each file keeps the mtime it was saved with (the download set it): the next save's
    `gcloud storage rsync` compares size and mtime, and would otherwise send every restored
    file again (googlecloudsdk/command_lib/storage/rsync_command_util.py).
    With `stamps` (JAX eviction on), each `KEY-cache` also gets a `KEY-atime` stamp (8 bytes,
    little-endian ns): JAX's eviction reads one for every entry and fails on a missing one
    (jax/_src/lru_cache.py). Without eviction JAX never reads or writes them.
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
        if stamps and rel.endswith("-cache") and not os.path.exists(atime):
            with open(atime + ".restore.tmp", "wb") as handle:
                handle.write(stamp)
            os.replace(atime + ".restore.tmp", atime)
        files += 1
        size += nbytes
    return files, size


def unwritable(target: str) -> str:
    """Why the install could not write into `target` ("" when it can)."""
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
    """After the pull: keep the fetched generation only if it matches the image; install it.

    The restore's time (its bound and the result's `seconds`) is the fetch's own time plus this
    step's, not the image pull the fetch ran alongside: a slow pull neither eats the restore's
    budget nor shows up as restore overhead.
    """
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
    # What the save uploads, and where, is this start's only: a previous start's state on the
    # same VM (another key or image) must not survive a failure below to misdirect the save.
    write_json(p["state"], {})
    in_pod = bool(args.in_pod)
    try:
        image = inspect_image(args.image, in_pod)
        digest = image.digest
        if not digest and in_pod:
            raise RuntimeError(
                f"no image digest for {args.image}: the pod status named none (the kubelet "
                "publishes imageID asynchronously; pod-image's log says how long it waited); "
                "a pod has no docker to ask"
            )
        if not digest:
            raise RuntimeError(f"cannot resolve the digest of {args.image}")
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
                    f"the newest generation ({candidate}) was made with another image; "
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
                files, size = install(staging, good, target, eviction_configured(image.env))
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
