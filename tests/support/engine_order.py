"""The order in which `pulumi up` replaces a resource and moves what depends on it.

Tests that drive the providers and the remote commands by hand must do so in the order the
engine would, or they prove an order that never happens. From pulumi/pulumi
`pkg/resource/deploy/step_generator.go` (read at commit 1b5949891b3c, `generateStepsFromDiff`,
the replacement branch, and `ScheduleDeletes`):

* create-before-replace (the provider's diff says `deleteBeforeReplace: false`): the steps are
  `CreateReplacement` then `Replace`, and "the delete step is generated 'later' on, after all
  creates/updates finish": `GenerateDeletes` runs once every resource was registered, and
  `ScheduleDeletes` orders the deletes so that "we can only delete a resource when all
  *resources that depend on it* complete deletion".
* delete-before-replace: `DeleteReplacement` steps for the resource and the dependants that
  would be replaced with it come first, then `Replace` and `CreateReplacement`.

Between the two, each dependant is registered again once the outputs it depends on are known
(the program's `Output`s resolve only then), so its step starts right after its last changed
dependency's step ended, in parallel with unrelated ones (the step executor's worker pool).
`dependencies` comes from a mocked run of the program (`ProgramRun.dependencies`), so a
dependency the program does not declare is one this order does not wait for either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One step the simulated engine ran: `create`, `update` or `delete` of a resource."""

    kind: str
    name: str
    started: float
    ended: float


def dependants(dependencies: Mapping[str, set[str]], root: str) -> list[str]:
    """`root` and every resource that depends on it, directly or not, in registration order."""
    changed = [root]
    for name, deps in dependencies.items():  # registration order: dependencies come first
        if name != root and deps & set(changed):
            changed.append(name)
    return changed


def _run_parallel(
    order: list[str],
    waits_for: Mapping[str, set[str]],
    action: Callable[[str], None],
    kind_of: Callable[[str], str],
    log: list[Step],
) -> None:
    """Run `action(name)` for each name once the names it waits for are done; the first
    failure stops the rest (the engine stops issuing steps after an error)."""
    done = {name: threading.Event() for name in order}
    failed: list[BaseException] = []
    lock = threading.Lock()

    def run(name: str) -> None:
        for dep in waits_for[name]:
            done[dep].wait()
        if failed:
            done[name].set()
            return
        started = time.monotonic()
        try:
            action(name)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            failed.append(error)
        finally:
            with lock:
                log.append(Step(kind_of(name), name, started, time.monotonic()))
            done[name].set()

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if failed:
        raise failed[0]


def replace(
    dependencies: Mapping[str, set[str]],
    root: str,
    *,
    replaced: set[str],
    step: Callable[[str], None],
    delete: Callable[[str], None],
    delete_before_replace: bool = False,
) -> list[Step]:
    """Replace `root` as `pulumi up` would, calling `step(name)` to create a replacement or
    update a dependant, and `delete(name)` to delete the old instance of each of `replaced`.
    Returns the steps with their times, in the order they ended."""
    changed = dependants(dependencies, root)
    log: list[Step] = []
    old_deps = {name: dependencies.get(name, set()) & replaced for name in replaced}
    # Deletes run dependants first: a delete waits for the deletes of what depends on it.
    deletes_wait = {name: {d for d in replaced if name in old_deps[d]} for name in replaced}
    delete_order = [name for name in reversed(changed) if name in replaced]

    def kind(name: str) -> str:
        return "create" if name in replaced else "update"

    if delete_before_replace:
        _run_parallel(delete_order, deletes_wait, delete, lambda _: "delete", log)
    waits = {name: dependencies.get(name, set()) & set(changed) for name in changed}
    _run_parallel(changed, waits, step, kind, log)
    if not delete_before_replace:
        _run_parallel(delete_order, deletes_wait, delete, lambda _: "delete", log)
    return log


def destroy(dependencies: Mapping[str, set[str]], delete: Callable[[str], None]) -> list[Step]:
    """Delete every resource as `pulumi destroy` would, calling `delete(name)` for each; returns
    the steps with their times, in the order they ended.

    Every resource is condemned, and `ScheduleDeletes` (the same file) splits them into
    antichains: "we can only delete a resource when all *resources that depend on it* complete
    deletion". Here each delete waits only for the deletes of its own dependants, which lets
    unrelated deletes start earlier than the engine's antichains would: an order that holds
    here holds there too."""
    names = list(dependencies)
    waits = {name: {d for d in names if name in dependencies[d]} for name in names}
    log: list[Step] = []
    _run_parallel(list(reversed(names)), waits, delete, lambda _: "delete", log)
    return log
