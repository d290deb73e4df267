"""Stand-in for `pulumi-language-python`: the Python SDK's own language-runtime server, as a plugin.

The Go module proxy refuses `github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3`
(scripts/engine/build.sh --status), and the project may not build it from a copy of pulumi/pulumi.
This is the suite's own language host, built on the server the Automation API's inline programs
use (`pulumi.automation._server.LanguageServer`, pulumi 3.272), which already answers About,
GetRequiredPlugins and GetPluginInfo and runs a program function in a stack. What it adds, each
read from the Go host (pulumi/pulumi `sdk/python/cmd/pulumi-language-python/main.go`, v3.259.0)
and the script that host starts (`sdk/python/cmd/pulumi-language-python-exec`):

- started by the CLI as `pulumi-language-python ENGINE_ADDRESS` in the project's directory
  (`sdk/go/common/resource/plugin/langruntime_plugin.go`, `NewLanguageRuntime`); the port goes to
  stdout alone on its line (`main`: `fmt.Printf("%d\\n", handle.Port)`);
- the program runs in the virtualenv `Pulumi.yaml` names (`runtime.options.virtualenv`,
  relative to the project root, as `parseOptions` and the pip toolchain resolve it): the server
  re-executes itself with that virtualenv's python before it serves, since it runs the program
  in its own process (`LanguageServer.Run` does);
- Run: the entry point `Pulumi.yaml`'s `main` gives (`RunRequest.info.programDirectory` and
  `entryPoint`; a directory runs its `__main__.py`) with `runpy.run_path(..., "__main__")`, the
  working directory `pwd`, `sys.argv` = program and args, the engine address the host was started
  with (the exec script's `--engine`), the root directory, the config and its secret keys
  (`constructConfig`, `constructConfigSecretKeys` -> `set_all_config`); outcomes as the Go host
  reports the exec script's exits: a `RunError` is logged and the run fails "program exited with
  non-zero exit code: 1"; any other exception is logged as "Program failed with an unhandled
  exception:" and its traceback, and the run bails (exit code 32:
  `pythonProcessExitedAfterShowingUserActionableMessage`); `sys.exit(N)` as exit code N;
- GetRequiredPackages: one resource package per installed distribution that ships a
  `pulumi-plugin.json` with `"resource": true` (`listPulumiPackageInfos`,
  `packageDependencyFromPluginJSON`), so the engine knows the program's plugins and versions.

What the Go host does that this one does not (docs/testing.md, "The two stand-ins"): create the
virtualenv or install requirements (`EnsureVenv` in GetRequiredPackages, InstallDependencies:
`pulumi install`), GetProgramDependencies (`pulumi about`'s package list), RuntimeOptionsPrompts
(`pulumi new`), typecheckers (`typechecker: mypy|pyright`), poetry and uv toolchains, a debugger
(`attachDebugger`), Pack/Link/RunPlugin/Template/code generation, the Cancel RPC, OpenTelemetry
tracing, and the engine health check that ends the host when the engine dies.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pulumi
import yaml
from pulumi.automation._server import LanguageServer
from pulumi.runtime import settings
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

#: The Go host reports the CLI's version; this one, the SDK's whose server it is.
SDK_VERSION = metadata.version("pulumi")
#: The Go host's flags that take a value (main.go: `-tracing`, `-use-executor`).
VALUE_FLAGS = ("tracing", "use-executor")
#: The exec script's exit code for "an error was already shown to the user": the Go host answers
#: it with `bail` instead of an error of its own (main.go, Run).
USER_ACTIONABLE_EXIT = 32


def virtualenv_python(project_dir: Path) -> Path | None:
    """The python of the virtualenv `Pulumi.yaml` names, or None when it names none.

    As the Go host's pip toolchain: `runtime.options.virtualenv`, relative to the project root
    (`sdk/python/toolchain/pip.go`, `resolveVirtualEnvironmentPath`)."""
    manifest = project_dir / "Pulumi.yaml"
    if not manifest.is_file():
        return None
    project = yaml.safe_load(manifest.read_text()) or {}
    runtime = project.get("runtime")
    options = runtime.get("options") if isinstance(runtime, dict) else None
    venv = options.get("virtualenv") if isinstance(options, dict) else None
    if not isinstance(venv, str) or not venv:
        return None
    path = Path(venv) if Path(venv).is_absolute() else project_dir / venv
    return path / "bin" / "python"


def reexec_in_virtualenv(project_dir: Path) -> None:
    """Run this host under the project's virtualenv, since the program runs in its process.

    A virtualenv that does not exist is the Go host's error too (`ValidateVenv`): it names the
    directory and the fix, and the CLI shows it when the plugin fails to start."""
    python = virtualenv_python(project_dir)
    if python is None:
        return
    if not python.exists():
        sys.stderr.write(
            f"The virtual environment {python.parent.parent} named by Pulumi.yaml's "
            "runtime.options.virtualenv does not exist. Fix: python3 -m venv "
            f"{python.parent.parent} && {python} -m pip install -r requirements.txt\n"
        )
        sys.exit(1)
    if Path(sys.prefix).resolve() == python.parent.parent.resolve():
        return
    argv = [str(python), "-P", str(Path(__file__).resolve()), *sys.argv[1:]]
    os.execv(argv[0], argv)  # noqa: S606 - the same host, in the program's interpreter


@dataclass
class Outcome:
    """How a program run ended, as the exec script's exit code would tell the Go host."""

    exit_code: int = 0

    def response(self) -> language_pb2.RunResponse | None:
        """The Go host's answer for this exit code; None when the run succeeded."""
        if self.exit_code == 0:
            return None
        if self.exit_code == USER_ACTIONABLE_EXIT:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(
            error=f"program exited with non-zero exit code: {self.exit_code}"
        )


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
    """`LanguageServer`, running the project's program file instead of an inline function."""

    def __init__(self, engine_address: str) -> None:
        super().__init__(program=self._run_program)
        self.engine_address = engine_address
        self._request: language_pb2.RunRequest | None = None
        self._outcome = Outcome()

    def GetPluginInfo(self, request: Any, context: Any) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=SDK_VERSION)

    def GetRequiredPackages(
        self, request: Any, context: Any
    ) -> language_pb2.GetRequiredPackagesResponse:
        packages = [
            plugin_pb2.PackageDependency(
                kind="resource",
                name=str(info["name"]),
                version=str(info.get("version", "")),
                server=str(info.get("server", "")),
            )
            for info in _plugin_jsons()
        ]
        return language_pb2.GetRequiredPackagesResponse(packages=packages)

    def Run(self, request: language_pb2.RunRequest, context: Any) -> language_pb2.RunResponse:
        # LanguageServer.Run reads the engine address from args[0] (the Automation API's way);
        # a plugin gets it on its command line and args are the program's own.
        inline = language_pb2.RunRequest()
        inline.CopyFrom(request)
        del inline.args[:]
        inline.args.append(self.engine_address)
        self._request = request
        self._outcome = Outcome()
        answer: language_pb2.RunResponse = super().Run(inline, context)  # type: ignore[no-untyped-call]
        return self._outcome.response() or answer

    def _run_program(self) -> None:
        """The exec script's `run`, inside the stack `LanguageServer.Run` made."""
        request = self._request
        assert request is not None
        info = request.info
        program_dir = Path(info.program_directory or request.pwd or os.getcwd())
        program = program_dir / (info.entry_point or ".")
        settings.SETTINGS.root_directory = info.root_directory or str(program_dir)
        if request.pwd:
            os.chdir(request.pwd)
        sys.argv = [info.entry_point or str(program), *request.args]  # the exec script's argv
        # The program's directory stays importable for the whole run, also for imports an
        # `apply` makes after run_path returned (run_path restores sys.path on return).
        if str(program_dir) not in sys.path:
            sys.path.insert(0, str(program_dir))
        try:
            runpy.run_path(str(program), run_name="__main__")
        except pulumi.RunError as error:
            pulumi.log.error(str(error))
            self._outcome.exit_code = 1
        except SystemExit as done:
            code = done.code
            self._outcome.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        except Exception:  # noqa: BLE001 - the exec script's catch-all, reported as it reports it
            pulumi.log.error(
                "Program failed with an unhandled exception:\n" + _user_traceback(program)
            )
            self._outcome.exit_code = USER_ACTIONABLE_EXIT


def _plugin_jsons() -> Iterator[dict[str, Any]]:
    """Each installed distribution's `pulumi-plugin.json` that declares a resource plugin."""
    seen: set[str] = set()
    for dist in metadata.distributions():
        for file in dist.files or ():
            if file.name != "pulumi-plugin.json":
                continue
            try:
                info = json.loads(Path(str(dist.locate_file(file))).read_text())
            except (OSError, ValueError):
                continue
            name = info.get("name")
            if info.get("resource") and isinstance(name, str) and name not in seen:
                seen.add(name)
                yield info


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
    """The last positional argument, as Go's `flag` package leaves it after the flags (the
    engine passes it last: `buildArgsForNewPlugin`); `-tracing X` and `-tracing=X` skipped."""
    positional: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = "=" not in arg and arg.lstrip("-") in VALUE_FLAGS
        else:
            positional.append(arg)
    return positional[-1] if positional else ""


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
