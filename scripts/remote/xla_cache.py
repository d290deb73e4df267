"""Runs on the node: restore the XLA compile cache before the server starts, save it after ready.

A flex-start node is deleted with its disk, so without this every new node compiles again for
~685 s. No command ever fails the start: a problem means a cold start. Stdlib only, Python 3.9+
(the node's own python3). Layout, commands and parts: docs/compile-cache.md "The node tool".
"""

from __future__ import annotations

import argparse
import os
import sys

# Loaded by path (the tests), Python does not look beside this file on its own.
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
