"""One way to run a script on the node: every remote.Command of the VM backend is made here.

The options they share: stdout and stderr logged (the script's progress lines reach the
operator), and no previous output in the environment (else each re-run sends
PULUMI_COMMAND_STDOUT/STDERR as SSH `env` requests, which sshd refuses without AcceptEnv,
logging a warning every time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_command as command


def node_command(
    name: str,
    connection: command.remote.ConnectionArgs,
    create: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    triggers: Sequence[Any] | None = None,
) -> command.remote.Command:
    return command.remote.Command(
        name,
        connection=connection,
        create=create,
        triggers=list(triggers) if triggers is not None else None,
        logging=command.remote.Logging.STDOUT_AND_STDERR,
        add_previous_output_in_env=False,
        opts=opts,
    )
