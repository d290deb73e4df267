"""`gcloud storage` for the restore, and which transport a run uses.

An older Cloud SDK without `storage rsync` refuses the command line (exit status 2,
googlecloudsdk/calliope/parser_extensions.py): the run then uses the JSON API. The save always
uses the JSON API: docs/compile-cache.md "Concurrent saves" says why.
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
#: calliope's parser error: "Invalid choice: 'rsync'." or "unrecognized arguments".
GCLOUD_USAGE_ERROR = 2


class GcloudUnusable(RuntimeError):
    """gcloud refused the command line itself: an older Cloud SDK."""


class Gcloud:
    """`gcloud storage` with the VM's own identity. No pool of its own: `rsync` is parallel
    already (googlecloudsdk/command_lib/storage/optimize_parameters_util.py)."""

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
            raise GcloudUnusable(f"{what}: {self._error(done)}")
        return done

    @staticmethod
    def _error(done: subprocess.CompletedProcess[bytes]) -> str:
        """The `ERROR: ...` line: a usage error prints suggestions and usage after it."""
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
    """`gcloud storage` until it refuses a command line, then the JSON API for the rest of the
    run. A real failure (network, permission) does not switch."""

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
    """The restore's store, one per run, so that a fallback once taken holds."""
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
    """The run's one JSON API client, so that its token is fetched once."""
    store = _STORES.get("json-api")
    if not isinstance(store, JsonApi):
        store = _STORES["json-api"] = JsonApi()
    return store
