"""`gcloud storage` for the restore, and which transport a run uses (scripts/remote/xla_cache.py).

The restore reads LATEST and a manifest and downloads a generation: with `gcloud storage` where
the VM has gcloud, else with the Cloud Storage JSON API. An older Cloud SDK without `storage
rsync` refuses the command line itself (exit status 2, "Invalid choice",
googlecloudsdk/calliope/parser_extensions.py): the tool then uses the JSON API for the rest of
the run. TPU_VLLM_CACHE_VIA=gcloud|api forces one.

The save always uses the JSON API (`api_store`), on both transports: each of its writes is
conditional on a generation it read (docs/compile-cache.md, "Concurrent saves"), and only the
JSON API reads an object together with its generation and answers a failed precondition with a
status (412) rather than a message to parse. Same identity either way: gcloud on a VM takes
its token from the same metadata server.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from typing import TypeVar

from xla_cache_api import JsonApi
from xla_cache_base import Deadline, log

T = TypeVar("T")
#: gcloud's exit status for a command line it cannot parse (an unknown command or flag).
GCLOUD_USAGE_ERROR = 2


class GcloudUnusable(RuntimeError):
    """gcloud refused the command line itself (exit status 2): an older Cloud SDK lacks it."""


class Gcloud:
    """`gcloud storage` with the VM's own identity (its service account, via the metadata).

    Its `rsync` is already parallel: it runs its copy tasks with `parallelizable=True`
    (surface/storage/rsync.py), and task_executor.execute_tasks then uses the parallel
    TaskGraphExecutor with `storage/process_count` processes x `storage/thread_count` threads,
    which, unless set, are 16 x 4 for a multi-file transfer on 4+ CPUs and 2 x 10 below that
    (googlecloudsdk/command_lib/storage/tasks/task_executor.py, task_util.py
    should_use_parallelism, optimize_parameters_util.py detect_and_set_best_config). So this
    class adds no pool of its own.
    """

    name = "gcloud"

    def _run(
        self, args: list[str], deadline: Deadline, what: str
    ) -> subprocess.CompletedProcess[bytes]:
        timeout = deadline.check(what)
        proc = subprocess.Popen(
            ["gcloud", "storage", *args, "--quiet"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TimeoutError(f"{what}: still running after {timeout:.0f}s; stopped") from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if done.returncode == GCLOUD_USAGE_ERROR:
            # calliope's parser error: `self.exit(2)` after "Invalid choice: 'rsync'." or
            # "unrecognized arguments" (googlecloudsdk/calliope/parser_extensions.py).
            raise GcloudUnusable(f"{what}: {self._error(done)}")
        return done

    @staticmethod
    def _error(done: subprocess.CompletedProcess[bytes]) -> str:
        """gcloud's `ERROR: ...` line (a usage error prints suggestions and usage after it)."""
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")]
        return (errors or lines or [f"exit code {done.returncode}"])[-1]

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        done = self._run(["cat", url], deadline, f"read {url}")
        if done.returncode == 0:
            return done.stdout
        text = done.stderr.decode(errors="replace")
        if "matched no objects" in text or "not found" in text.lower() or "404" in text:
            return None
        raise RuntimeError(f"read {url}: {self._error(done)}")

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        os.makedirs(dest, exist_ok=True)
        done = self._run(["rsync", "--recursive", url, dest], deadline, f"download {url}")
        if done.returncode != 0:
            raise RuntimeError(f"download {url}: {self._error(done)}")


class GcloudThenApi:
    """`gcloud storage`, until it refuses a command line (an older Cloud SDK): from then on, for
    the rest of this run, the JSON API. A real failure (network, permission) is not retried."""

    def __init__(self) -> None:
        self.gcloud = Gcloud()
        self.api: JsonApi | None = None

    @property
    def name(self) -> str:
        return "api (gcloud storage unusable)" if self.api else "gcloud"

    def _fallback(self, error: GcloudUnusable) -> JsonApi:
        if self.api is None:
            log(
                f"gcloud storage cannot run this here ({error}): an older Cloud SDK; "
                "using the Cloud Storage JSON API for the rest of this run"
            )
            self.api = api_store()
        return self.api

    def _use(self, call: Callable[[Gcloud | JsonApi], T]) -> T:
        if self.api is None:
            try:
                return call(self.gcloud)
            except GcloudUnusable as error:
                self._fallback(error)
        assert self.api is not None
        return call(self.api)

    def read(self, url: str, deadline: Deadline) -> bytes | None:
        return self._use(lambda store: store.read(url, deadline))

    def download(self, url: str, dest: str, deadline: Deadline) -> None:
        self._use(lambda store: store.download(url, dest, deadline))


_STORES: dict[str, Gcloud | JsonApi | GcloudThenApi] = {}


def transport() -> Gcloud | JsonApi | GcloudThenApi:
    """The restore's store, one per run (a fallback, once taken, holds for the later calls)."""
    via = os.environ.get("TPU_VLLM_CACHE_VIA", "auto")
    if via not in _STORES:
        if via == "gcloud":
            _STORES[via] = Gcloud()
        elif via == "api" or not shutil.which("gcloud"):
            _STORES[via] = api_store()
        else:
            _STORES[via] = GcloudThenApi()
    return _STORES[via]


def api_store() -> JsonApi:
    """The run's one JSON API client (the save's store on every transport; its token cached)."""
    store = _STORES.get("json-api")
    if not isinstance(store, JsonApi):
        store = _STORES["json-api"] = JsonApi()
    return store
