"""What happens when a flex-start run ends, and the command that renews the stack.

For flex-start, expiry is the normal lifecycle: Google deletes the VM at `expires_at` and the
queued resource goes to SUSPENDED. `scripts/renew.py STACK` notices that and runs
`pulumi up --refresh`; `.github/workflows/renew.yml` runs it on a schedule. The program tells
the user both facts (the `renew_command` output and a message at `pulumi up`), so nobody has to
discover the expiry from a dead endpoint.
"""

from __future__ import annotations

import shlex

#: The script, relative to the project root.
RENEW_SCRIPT = "scripts/renew.py"
#: The interpreter convention of the README (Quickstart) and of .github/workflows/renew.yml.
VENV_PYTHON = ".venv/bin/python"
#: How often `.github/workflows/renew.yml` runs it (its cron; a test keeps the two equal).
SCHEDULE_MINUTES = 15
#: The minute past the hour of its first run. Never 0: GitHub delays scheduled runs at high
#: load, "High load times include the start of every hour", and may drop queued ones (GitHub
#: docs, "Events that trigger workflows", `schedule`).
SCHEDULE_OFFSET_MINUTES = 7
#: Scheduled runs that may be lost in a row before one notices an expiry. GitHub may drop a
#: run at high load, so the estimate allows for one; GitHub's start delay comes on top.
DROPPED_RUNS_ALLOWED = 1


def schedule_minutes() -> tuple[int, ...]:
    """The minutes past each hour at which the renew workflow runs: every `SCHEDULE_MINUTES`
    from `SCHEDULE_OFFSET_MINUTES`, none at minute 0. The period must divide the hour, or the
    runs would not be evenly spaced across the hour boundary."""
    if 60 % SCHEDULE_MINUTES or SCHEDULE_OFFSET_MINUTES % SCHEDULE_MINUTES == 0:
        raise ValueError(
            f"SCHEDULE_MINUTES={SCHEDULE_MINUTES} must divide 60 and SCHEDULE_OFFSET_MINUTES="
            f"{SCHEDULE_OFFSET_MINUTES} must not be a multiple of it (no run at minute 0)"
        )
    first = SCHEDULE_OFFSET_MINUTES % SCHEDULE_MINUTES
    return tuple(range(first, 60, SCHEDULE_MINUTES))


def schedule_cron() -> str:
    """The renew workflow's cron expression, e.g. `7,22,37,52 * * * *`."""
    return f"{','.join(str(m) for m in schedule_minutes())} * * * *"


def detection_seconds() -> int:
    """The longest time from an expiry until a scheduled run sees it, GitHub's start delay
    aside: one period, plus one more for each dropped run allowed for."""
    return (1 + DROPPED_RUNS_ALLOWED) * SCHEDULE_MINUTES * 60


def renew_command(stack: str) -> str:
    """The command that renews `stack`; safe any time: it does nothing while the TPU is live.

    With the project's virtualenv, as the README's commands and the renew workflow run Python:
    a bare `python` on a fresh machine has none of the program's packages."""
    return f"{VENV_PYTHON} {RENEW_SCRIPT} {shlex.quote(stack)}"


def expiry_notice(stack: str, max_run_seconds: int | None, expires_at: str | None) -> str:
    """One line for the end of `pulumi up`: when the node goes away and what brings it back."""
    command = renew_command(stack)
    if max_run_seconds is None:
        return (
            f"{stack}: this TPU has no run limit (spot or on-demand): it bills until it is "
            f"preempted or destroyed. If it is preempted, `{command}` requests a new one."
        )
    when = f"at {expires_at}" if expires_at else f"{max_run_seconds // 60} minutes after it started"
    return (
        f"{stack}: the flex-start run ends {when}; Google then deletes the VM and the endpoint "
        f"stops answering until `{command}` requests a new node (.github/workflows/renew.yml "
        f"runs it every {SCHEDULE_MINUTES} minutes for the stacks in RENEW_STACKS)."
    )


def gke_recycle_notice(stack: str, max_run_seconds: int | None, lead_seconds: int = 0) -> str:
    """The GKE backend's line for the end of `pulumi up`: nodes end, but nothing needs renewing:
    the stack's ComputeClass has GKE seek each node's replacement `lead_seconds` ahead."""
    if max_run_seconds is None:
        return (
            f"{stack}: the TPU nodes have no run limit (spot or on-demand): they bill until "
            "preempted or destroyed; GKE replaces a preempted node for its pending pod."
        )
    return (
        f"{stack}: each flex-start TPU node is deleted {max_run_seconds // 60} minutes after it "
        f"started; GKE seeks its replacement {lead_seconds // 60} minutes before that "
        "(renewal.lead), a PodDisruptionBudget keeps one replica serving while a replica "
        "moves, and the address stays. There is nothing to renew (renew_command is empty on "
        "backend gke)."
    )
