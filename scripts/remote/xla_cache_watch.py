"""When the node saves: after ready, every few minutes, and when the server stops.

Requests bring shapes the start did not compile, each an entry worth carrying. A VM's deletion
at a flex-start run's end gives no reliable moment for a last save, so there the periodic save
is the bound. Table of when: docs/compile-cache.md "When the node saves".
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from xla_cache_base import Deadline, log, paths, read_json, write_json
from xla_cache_gcloud import api_store
from xla_cache_save import Scanner, save_once

#: The lifecycle rule counts 30 days; a renewal costs a request per object.
RENEW_EVERY = 86400.0


class Stopping(BaseException):
    """A BaseException, so that no `except Exception` on the way swallows it."""


def save_step(
    state: dict[str, Any],
    scanner: Scanner,
    work: str,
    timeout: float,
    *,
    why: str,
    move_latest: bool,
    renew: bool,
) -> dict[str, Any] | None:
    url = f"{state['prefix']}{state['generation']}/"
    try:
        summary = save_once(
            api_store(), state, scanner, Deadline(timeout), move_latest=move_latest, renew=renew
        )
    except Exception as error:  # noqa: BLE001 - the server serves either way
        summary = {"ok": False, "error": str(error), "generation": url, "why": why}
        log(f"save FAILED ({error}); the server is unaffected, the next save tries again")
        write_json(paths(work)["save"], summary)
        return summary
    if summary is None:
        return None
    summary["why"] = why
    log(f"saved: {' '.join(f'{k}={v}' for k, v in sorted(summary.items()))}")
    write_json(paths(work)["save"], summary)
    return summary


def load_state(work: str) -> dict[str, Any] | None:
    """Read once: a later start rewrites it, and the old container's watcher saves into its own."""
    state = read_json(paths(work)["state"])
    if not state.get("generation"):
        log("nothing to save (the cache is off, or the restore never learned the image digest)")
        return None
    return state


def cmd_save(args: argparse.Namespace) -> int:
    state = load_state(args.work)
    if state is None:
        return 0
    summary = save_step(
        state, Scanner(state["dir"]), args.work, args.timeout, why="save",
        move_latest=not args.keep_latest, renew=not args.no_touch,
    )  # fmt: skip
    return 0 if summary is None or summary["ok"] else 1


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Once: a second signal is ignored while the last save runs. As the GKE sidecar's PID 1
    the process gets only the signals it handles (pid_namespaces(7))."""
    raised: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if raised:
            return
        raised.append(signum)
        raise Stopping(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, previous in old.items():
            signal.signal(signum, previous)


def container_stopped(container: str, seconds: float) -> bool:
    """`docker wait` returns once it is not running, at once if it is gone (docker CLI 28)."""
    proc = subprocess.Popen(
        ["sudo", "docker", "wait", container],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def only_watcher(work: str, name: str) -> Iterator[bool]:
    os.makedirs(work, exist_ok=True)
    handle = open(os.path.join(work, f"watch-{name}.lock"), "a+")  # noqa: SIM115
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield True
    finally:
        handle.close()


def cmd_watch(args: argparse.Namespace) -> int:
    state = load_state(args.work)
    if state is None:
        return 0
    name = args.container or "pod"
    with only_watcher(args.work, "".join(c for c in name if c.isalnum()) or "pod") as alone:
        if not alone:
            log(f"another watcher already saves for {name}; leaving it to that one")
            return 0
        return watch(state, args)


def watch(state: dict[str, Any], args: argparse.Namespace) -> int:
    """The save at ready moves LATEST and renews; if it fails, the next that succeeds does."""
    scanner = Scanner(state["dir"])
    why = "stop"
    at_ready_done = False
    renewed = 0.0
    with stop_on_signals():
        try:
            first = save_step(
                state, scanner, args.work, args.timeout, why="ready", move_latest=True,
                renew=True,
            )  # fmt: skip
            if first is not None and first["ok"]:
                at_ready_done, renewed = True, time.time()
            log(
                f"saving again every {args.every:.0f}s"
                + (f" and when {args.container} stops" if args.container else "")
                + f"; a last save on SIGTERM (up to {args.stop_timeout:.0f}s)"
            )
            while True:
                if args.container:
                    if container_stopped(args.container, args.every):
                        why = f"the container {args.container} stopped"
                        break
                else:
                    time.sleep(args.every)
                renew = not at_ready_done or time.time() - renewed >= RENEW_EVERY
                summary = save_step(
                    state, scanner, args.work, args.timeout, why="periodic",
                    move_latest=not at_ready_done, renew=renew,
                )  # fmt: skip
                if summary is not None and summary["ok"]:
                    at_ready_done = True
                    renewed = time.time() if renew else renewed
        except Stopping as signal_name:
            why = f"{signal_name}"
        # Still under the handler: a second signal is ignored while this runs.
        log(f"{why}: saving what is new one last time (up to {args.stop_timeout:.0f}s)")
        save_step(
            state, scanner, args.work, args.stop_timeout, why=why, move_latest=False,
            renew=False,
        )  # fmt: skip
    return 0
