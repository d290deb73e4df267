"""A trivial Pulumi program run by `pulumi up --yes` through the Automation API (a subprocess).

    python tests/support/engine_inline_program.py WORK_DIR TARGET_FILE [--absent-plugin]

Why the Automation API: the Go module proxy refuses the Python language host
(scripts/engine/build.sh --status), and an inline program needs none. `stack.up()` runs the built
`pulumi up --yes --skip-preview --client=ADDRESS`: the CLI connects to the language server this
process serves on 127.0.0.1 instead of starting pulumi-language-python (pulumi/pulumi
pkg/engine/plugin_host.go, `connectToLanguageRuntime`; sdk/python/lib/pulumi/automation/
_local_workspace.py and _server.py). Everything else is the real engine: the deployment, the file
backend's state, the passphrase secrets provider, and the dynamic provider, which the engine runs
as `pulumi-resource-pulumi-python` (`python -m pulumi.dynamic`) found on PATH.

The dynamic provider writes TARGET_FILE on create and removes it on delete, so the test sees the
engine's steps on disk. With --absent-plugin the program also declares a resource of a package no
one has, to show the engine names a missing plugin instead of downloading it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pulumi
from pulumi import automation as auto
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

PROJECT = "engine-test"
STACK = "dev"
#: Exported as a secret: the state on the file backend must hold it encrypted only.
SECRET_SENTINEL = "engine-secret-output-sentinel"
#: A package that exists nowhere: its plugin is neither on PATH nor downloadable.
ABSENT_TYPE = "tpuvllmabsent:index:Thing"
ABSENT_VERSION = "1.0.0"


class FileProvider(ResourceProvider):
    """Create writes the file, delete removes it (pulumi.dynamic.ResourceProvider)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        Path(props["path"]).write_text("made by the engine\n")
        return CreateResult(id_=props["path"], outs=props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        Path(_id).unlink()


class ManagedFile(Resource):
    """One file on disk, owned by the stack."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(FileProvider(), name, {"path": path})


def main(argv: list[str]) -> int:
    work_dir, target = argv[0], argv[1]
    absent = "--absent-plugin" in argv[2:]

    def program() -> None:
        made = ManagedFile("file", target)
        pulumi.export("path", made.id)
        pulumi.export("secret", pulumi.Output.secret(SECRET_SENTINEL))
        if absent:
            pulumi.CustomResource(
                ABSENT_TYPE, "absent", {}, opts=pulumi.ResourceOptions(version=ABSENT_VERSION)
            )

    options = auto.LocalWorkspaceOptions(
        work_dir=work_dir,
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python"),
    )
    stack = auto.create_or_select_stack(STACK, project_name=PROJECT, program=program, opts=options)
    try:
        stack.up(on_output=print)
    except auto.CommandError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
