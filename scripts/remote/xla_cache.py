"""Runs on the node: restore the XLA compile cache before the server starts, save it after ready.

Why: a flex-start node is deleted with its disk, so every new node compiles for ~685 s (seed 000)
unless the JAX persistent cache (`~/.cache/vllm/xla_cache`) comes back from Cloud Storage first.
It is copied to local disk rather than read from `gs://` (docs/compile-cache.md).

Layout under the prefix `gs://BUCKET/xla-cache/KEY/` (components/compile_cache.py):
  GENERATION/...            the cache files, GENERATION = `img-` + the image digest's first 16 hex
  GENERATION/MANIFEST.json  {"files": {path: {"size", "sha256", "md5"}}}, written after the files
  LATEST                    the generation the newest save wrote (a fetch without --image
                            takes it)

Commands (each logs to stderr, never fails the start: problems mean a cold start):
  fetch   --prefix P --work W --timeout S [--image NAME@sha256:D] [--in-pod]
                                             the pinned image's generation (else LATEST's) into
                                             W/staging (runs during the image pull)
  install --prefix P --work W --dir D --image I --timeout S [--in-pod]
                                             pinned digest -> generation; verify; copy into D,
                                             each file with its saved mtime; write
                                             W/result.json (the readiness result's `cache`).
                                             I must be NAME@sha256:... (components/image_pin.py)
  --in-pod (both): the token fetch also retries 403 and 404 (a GKE metadata server starting)
  off     --work W                           the cache is disabled: say so in W/result.json
  save    --work W [--timeout S] [--keep-latest] [--no-touch]
                                             upload what the bucket lacks, merge MANIFEST,
                                             point LATEST here (only if unset with
                                             --keep-latest), renew custom times (lifecycle)
  watch   --work W --every S [--container C] [--timeout S] [--stop-timeout S]
                                             `save` now, again every S seconds, and a last
                                             time when the container C stops or on SIGTERM

The parts, one job each (the node gets them all beside this file: the start script writes them
into ~/.tpu-vllm, the GKE ConfigMap mounts them at /tpu-vllm; components/remote_scripts.py
XLA_CACHE_MODULES): xla_cache_base (layout, deadline, files), xla_cache_pool (the bounded
transfer pool), xla_cache_retry (which failures are tried again, and how long),
xla_cache_resumable (a large entry's resumable upload), xla_cache_api (the Cloud Storage JSON
API, with generation preconditions),
xla_cache_gcloud (`gcloud storage` for the restore, and which transport), xla_cache_restore
(fetch, install, off), xla_cache_save (one save, safe beside others), xla_cache_watch (when to
save). Transports: the restore uses `gcloud storage` where the VM has gcloud, else the JSON API
with a token from the metadata server (TPU_VLLM_CACHE_VIA=gcloud|api forces one;
GCE_METADATA_HOST and STORAGE_API_ENDPOINT override the endpoints, in tests); the save always
uses the JSON API (xla_cache_gcloud says why). The JSON API moves TPU_VLLM_CACHE_WORKERS objects
at once (default 16) both ways. Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import os
import sys

# The parts live beside this file. Run as a script, Python already looks there first; loaded
# by path (the tests), it does not.
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import xla_cache_api as api  # noqa: E402
import xla_cache_base as base  # noqa: E402
import xla_cache_gcloud as gcloud  # noqa: E402
import xla_cache_pool as pool  # noqa: E402
import xla_cache_restore as restore  # noqa: E402
import xla_cache_resumable as resumable  # noqa: E402
import xla_cache_retry as retry  # noqa: E402
import xla_cache_save as save  # noqa: E402
import xla_cache_watch as watch  # noqa: E402

# What tests and the benchmark reach for by the tool's own name.
Deadline = base.Deadline
JsonApi = api.JsonApi
generation_name = base.generation_name
read_json = base.read_json
write_json = base.write_json
DEFAULT_WORKERS = pool.DEFAULT_WORKERS
MODULES = (base, pool, retry, resumable, api, gcloud, restore, save, watch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xla_cache.py")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch")
    install = sub.add_parser("install")
    off = sub.add_parser("off")
    save_ = sub.add_parser("save")
    watch_ = sub.add_parser("watch")
    for each in (fetch, install, off, save_, watch_):
        each.add_argument("--work", required=True)
    for each in (fetch, install):
        each.add_argument("--prefix", required=True)
        each.add_argument("--timeout", type=float, required=True)
        each.add_argument("--in-pod", action="store_true")
    install.add_argument("--dir", required=True)
    install.add_argument("--image", required=True)
    fetch.add_argument("--image", default="")
    for each in (save_, watch_):
        each.add_argument("--timeout", type=float, default=base.DEFAULT_SAVE_TIMEOUT)
    save_.add_argument("--keep-latest", action="store_true")
    save_.add_argument("--no-touch", action="store_true")
    watch_.add_argument("--every", type=float, required=True)
    watch_.add_argument("--container", default="")
    watch_.add_argument("--stop-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    api.JsonApi.in_pod = bool(getattr(args, "in_pod", False))
    args.work = os.path.expanduser(args.work)
    os.makedirs(args.work, exist_ok=True)
    handler = {
        "fetch": restore.cmd_fetch,
        "install": restore.cmd_install,
        "off": restore.cmd_off,
        "save": watch.cmd_save,
        "watch": watch.cmd_watch,
    }
    return handler[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
