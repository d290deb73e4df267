"""Every remote.Command of the VM backend, with its shared options: output logged, and no
previous output in the environment (sshd without AcceptEnv refuses it, warning at each run).
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
