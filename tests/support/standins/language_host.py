"""Stand-in for `pulumi-language-python`: the Python SDK's own language-runtime server, as a plugin.

The Go module proxy refuses `github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3`
(scripts/engine/build.sh --status), and the project may not build it from a copy of pulumi/pulumi.
This is the suite's own language host, built on the server the Automation API's inline programs
use (`pulumi.automation._server.LanguageServer`, pulumi 3.272), whose About, GetRequiredPlugins
and event-loop exception handler it keeps. What it does besides, each read from the Go host
(pulumi/pulumi `sdk/python/cmd/pulumi-language-python/main.go`, v3.259.0) and the script that
host starts (`sdk/python/cmd/pulumi-language-python-exec`, the same text at v3.274.0):

- started by the CLI as `pulumi-language-python ENGINE_ADDRESS` in the program's directory
  (`sdk/go/common/resource/plugin/langruntime_plugin.go`, `NewLanguageRuntime`); the port goes to
  stdout alone on its line (`main`: `fmt.Printf("%d\n", handle.Port)`);
- the program runs in the virtualenv `Pulumi.yaml` names (`runtime.options.virtualenv`, a
  string, relative to the project root, as `parseOptions` and the pip toolchain resolve it): the
  host finds the root above its directory and re-executes itself with that virtualenv's python
  before it serves, since it runs the program in its own process, as `LanguageServer` does;
- Run, as the exec script: settings (monitor, the command line's engine address, project,
  stack, root directory, organization, dry run, `parallel` x 4 executor threads), the config and
  its secret keys (`constructConfig`, `constructConfigSecretKeys`), a change to `pwd`, `sys.argv`
  = the entry point and the program's args, and `runpy.run_path(ENTRY_POINT, "__main__")` inside
  `run_in_stack`; the program's exceptions are caught outside it, as the script catches them, so
  the engine is never told a failed program finished (it would delete what was not registered);
  a `RunError` is logged and the run fails "program exited with non-zero exit code: 1", any other
  exception is logged as "Program failed with an unhandled exception:" with the traceback from the
  program's first frame and the run bails (exit code 32:
  `pythonProcessExitedAfterShowingUserActionableMessage`), `sys.exit(N)` is exit code N;
- GetRequiredPackages: every installed distribution with a `pulumi-plugin.json`, or named
  `pulumi-*`, as a resource package (`listPulumiPackageInfos`, `packageDependencyFromPluginJSON`:
  `"resource": false` skipped, name and version from the json else from the package, a `v`
  prefix, parameterizations), so the engine knows the program's plugins and their versions.

What the Go host does that this one does not (docs/testing.md, "The two stand-ins"): create the
virtualenv or install requirements (`EnsureVenv` in GetRequiredPackages, InstallDependencies:
`pulumi install`), set the virtualenv's environment for the program (`VIRTUAL_ENV`, its `bin`
first on PATH) and run it as a child process on its own main thread (here: in the host, on a gRPC
worker thread), GetProgramDependencies (`pulumi about`), RuntimeOptionsPrompts (`pulumi new`),
About's toolchain metadata, GetPluginInfo's CLI version (this reports the SDK's), typecheckers,
poetry and uv, a debugger, Pack/Link/RunPlugin/Template/code generation, the Cancel RPC, tracing,
and the health check that ends the host when the engine dies.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import json
import os
import re
import runpy
import sys
import traceback
from collections.abc import Iterator, Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pulumi
import yaml
from google.protobuf.json_format import MessageToDict
from pulumi.automation._server import LanguageServer, _suppress_unobserved_task_logging
from pulumi.runtime import reset_options, run_in_stack, set_all_config
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

#: The Go host reports the CLI's version; this one, the SDK's whose server it is.
SDK_VERSION = metadata.version("pulumi")
#: The exec script's exit code for "an error was already shown to the user": the Go host answers
#: it with `bail` instead of an error of its own (main.go, Run).
USER_ACTIONABLE_EXIT = 32


class VenvError(Exception):
    """The virtualenv option cannot be used; the message names the value and the fix."""


def project_root(start: Path) -> Path | None:
    """The nearest directory from `start` up that holds `Pulumi.yaml`. The CLI starts the host in
    the program's directory, which `main:` may put below the root (`getPwdMain`)."""
    for directory in (start, *start.parents):
        if (directory / "Pulumi.yaml").is_file():
            return directory
    return None


def virtualenv_python(root: Path, options: Mapping[str, Any]) -> Path | None:
    """The python of the `virtualenv` runtime option, or None when there is none. As the Go
    host's `parseOptions` and the pip toolchain's `resolveVirtualEnvironmentPath`: a string,
    relative to the project root."""
    venv = options.get("virtualenv")
    if venv is None:
        return None
    if not isinstance(venv, str):
        raise VenvError("virtualenv option must be a string")
    path = Path(venv) if Path(venv).is_absolute() else root / venv
    return path / "bin" / "python"


def manifest_options(root: Path) -> dict[str, Any]:
    """`runtime.options` of the project's `Pulumi.yaml` ({} when it has none)."""
    project = yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}
    runtime = project.get("runtime")
    options = runtime.get("options") if isinstance(runtime, dict) else None
    return dict(options) if isinstance(options, dict) else {}


def same_interpreter(python: Path) -> bool:
    return Path(sys.prefix).resolve() == python.parent.parent.resolve()


def reexec_in_virtualenv(start: Path) -> None:
    """Run this host under the project's virtualenv, since the program runs in its process.

    The Go host creates a missing virtualenv (`EnsureVenv`); this one names it and the fix, and
    the CLI shows that when the plugin fails to start."""
    root = project_root(start)
    if root is None:
        return
    try:
        python = virtualenv_python(root, manifest_options(root))
    except VenvError as error:
        sys.exit(str(error))
    if python is None or same_interpreter(python):
        return
    if not python.exists():
        venv = python.parent.parent
        sys.exit(
            f"The virtual environment {venv} named by Pulumi.yaml's runtime.options.virtualenv "
            f"does not exist. Fix: python3 -m venv {venv} && {python} -m pip install -r "
            "requirements.txt"
        )
    argv = [str(python), "-P", str(Path(__file__).resolve()), *sys.argv[1:]]
    os.execv(argv[0], argv)  # noqa: S606 - the same host, in the program's interpreter


def run_response(exit_code: int) -> language_pb2.RunResponse:
    """The Go host's answer for the exec script's exit code (main.go, Run)."""
    if exit_code == 0:
        return language_pb2.RunResponse()
    if exit_code == USER_ACTIONABLE_EXIT:
        return language_pb2.RunResponse(bail=True)
    return language_pb2.RunResponse(error=f"program exited with non-zero exit code: {exit_code}")


def _user_traceback(program: Path) -> str:
    """The traceback from the program's first frame on (the exec script's
    `_get_user_stacktrace`): the host's own frames say nothing to the user."""
    frames = traceback.extract_tb(sys.exc_info()[2])
    main = program / "__main__.py" if program.is_dir() else program
    for index, frame in enumerate(frames):
        if Path(frame.filename).resolve() == main.resolve():
            return traceback.format_exc(limit=-(len(frames) - index))
    return traceback.format_exc()


class ProgramLanguageServer(LanguageServer):
    """`LanguageServer`, running the project's program file as the exec script runs it.

    About, GetRequiredPlugins and the loop's exception handler are LanguageServer's own. Run
    keeps LanguageServer.Run's shape (a copied context, a new event loop, pending tasks cancelled
    at the end) but does what the exec script does inside it, where the two differ: the settings
    include the root directory and the engine address of the command line, and the program's
    exceptions are caught *outside* `run_in_stack`. Caught inside, the SDK would tell the engine
    the program finished (`run_pulumi_func` -> `SignalAndWaitForShutdown`), and the engine would
    delete every resource the program had not registered yet."""

    def __init__(self, engine_address: str) -> None:
        super().__init__(program=lambda: None)
        self.engine_address = engine_address

    def GetPluginInfo(self, request: Any, context: Any) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=SDK_VERSION)

    def GetRequiredPackages(
        self, request: Any, context: Any
    ) -> language_pb2.GetRequiredPackagesResponse:
        return language_pb2.GetRequiredPackagesResponse(packages=list(required_packages()))

    def Run(self, request: language_pb2.RunRequest, context: Any) -> language_pb2.RunResponse:
        _suppress_unobserved_task_logging()  # type: ignore[no-untyped-call]
        info = request.info
        options = MessageToDict(info.options) if info.HasField("options") else {}
        root = Path(info.root_directory or os.getcwd())
        try:
            python = virtualenv_python(root, options)
        except VenvError as error:
            return language_pb2.RunResponse(error=str(error))
        if python is not None and not same_interpreter(python):
            return language_pb2.RunResponse(
                error=f"the stand-in language host runs in {sys.prefix}, but the program's "
                f"virtualenv is {python.parent.parent}: start it from the project root"
            )
        return contextvars.copy_context().run(self._run, request)

    def _run(self, request: language_pb2.RunRequest) -> language_pb2.RunResponse:
        info = request.info
        reset_options(
            project=request.project,
            stack=request.stack,
            root_directory=info.root_directory or None,
            parallel=request.parallel,
            engine_address=self.engine_address,
            monitor_address=request.monitor_address,
            preview=request.dryRun,
            organization=request.organization or None,
        )
        set_all_config(dict(request.config), list(request.configSecretKeys))
        # The Go host's arguments (constructArguments): the entry point, relative to `pwd`, where
        # the exec script changes directory before `run_path`.
        entry = info.entry_point or "."
        os.chdir(request.pwd or info.program_directory or os.getcwd())
        sys.argv = [entry, *request.args]
        program = Path(entry).resolve()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        executor = ThreadPoolExecutor(max_workers=max(request.parallel, 1) * 4)
        loop.set_default_executor(executor)
        loop.set_exception_handler(self._exception_handler)
        exit_code = 1
        try:

            def run() -> None:
                if program.is_dir() and not (program / "__main__.py").exists():
                    pulumi.log.error(
                        f"unable to find main python program `__main__.py` in `{program}`"
                    )
                    sys.exit(USER_ACTIONABLE_EXIT)
                runpy.run_path(entry, run_name="__main__")

            loop.run_until_complete(run_in_stack(run))
            exit_code = 0
        except pulumi.RunError as error:
            pulumi.log.error(str(error))
        except SystemExit as done:
            exit_code = _exit_code(done)
        except Exception:  # noqa: BLE001 - the exec script's catch-all, reported as it reports it
            pulumi.log.error(
                "Program failed with an unhandled exception:\n" + _user_traceback(program)
            )
            exit_code = USER_ACTIONABLE_EXIT
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    loop.run_until_complete(task)
            executor.shutdown(wait=True)
            loop.close()
            sys.stdout.flush()
            sys.stderr.flush()
        return run_response(exit_code)


def _exit_code(done: SystemExit) -> int:
    """What the interpreter would exit with: `sys.exit("text")` prints it and exits 1."""
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    print(done.code, file=sys.stderr)
    return 1


#: Packages known to have no plugin (main.go, `packagesWithoutPlugins`).
PACKAGES_WITHOUT_PLUGINS = frozenset({"pulumi-policy", "pulumi-esc-sdk"})


def plugin_version(package_version: str) -> str | None:
    """A plugin version from a package version (main.go `determinePluginVersion`), for the
    plain and pre-release forms; None where the Go host gives up too (or for the rarer forms)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?", package_version)
    if found is None:
        return None
    segments = found.group(1).split(".")
    segments += ["0"] * (3 - len(segments))
    pre = {"a": "alpha", "b": "beta", "rc": "rc"}.get(found.group(2) or "")
    return ".".join(segments) + (f"-{pre}.{found.group(3)}" if pre else "")


def required_packages() -> Iterator[plugin_pb2.PackageDependency]:
    """The Go host's GetRequiredPackages (`listPulumiPackageInfos`,
    `packageDependencyFromPluginJSON`), over this interpreter's installed distributions: a
    package with a `pulumi-plugin.json`, or named `pulumi-*`, is a resource plugin unless its
    json says `"resource": false`; name and version from the json, else from the package."""
    seen: set[str] = set()
    for dist in metadata.distributions():
        package = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if package in seen or package in PACKAGES_WITHOUT_PLUGINS or package == "pulumi":
            continue
        seen.add(package)
        info = _plugin_json(dist)
        if info is None and not package.startswith("pulumi-"):
            continue
        info = info or {"resource": True}
        if not info.get("resource"):
            continue
        version = str(info.get("version") or plugin_version(dist.version) or "")
        if not version:
            continue
        yield plugin_pb2.PackageDependency(
            kind="resource",
            name=str(info.get("name") or package.removeprefix("pulumi-")),
            version=version if version.startswith("v") else f"v{version}",
            server=str(info.get("server") or ""),
            parameterization=_parameterization(info.get("parameterization")),
            extension=_parameterization(info.get("extensionParameterization")),
        )


def _plugin_json(dist: metadata.Distribution) -> dict[str, Any] | None:
    for file in dist.files or ():
        if file.name == "pulumi-plugin.json":
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(Path(str(dist.locate_file(file))).read_text())
                return loaded if isinstance(loaded, dict) else None
    return None


def _parameterization(value: Any) -> plugin_pb2.PackageParameterization | None:
    if not isinstance(value, dict):
        return None
    raw = value.get("value") or ""
    return plugin_pb2.PackageParameterization(
        name=str(value.get("name", "")),
        version=str(value.get("version", "")),
        value=base64.b64decode(raw) if raw else b"",
    )


def serve(engine_address: str) -> None:
    """Serve on a free loopback port, print it, and wait until the engine ends the process."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_CHANNEL_OPTIONS)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(
        ProgramLanguageServer(engine_address), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    server.wait_for_termination()


def engine_address(argv: list[str]) -> str:
    """The last argument that is no flag: the engine passes its address last
    (`buildArgsForNewPlugin`), after any flag and its value (`-tracing URL`); as the stand-in
    providers read it (tests/support/standins/provider.py `engine_address`)."""
    return next((arg for arg in reversed(argv) if not arg.startswith("-")), "")


def main(argv: list[str]) -> int:
    if {"-version", "--version"} & set(argv):
        print(SDK_VERSION)
        return 0
    reexec_in_virtualenv(Path.cwd())
    # The engine interrupts its plugins when it is done with them: a normal end.
    with contextlib.suppress(KeyboardInterrupt):
        serve(engine_address(argv))
    return 0


if __name__ == "__main__":
    contextvars.copy_context().run(main, sys.argv[1:])
