"""When a flex-start run ends, and the command that renews the stack ahead of it.

Expiry is flex-start's normal lifecycle, so `python -m scripts.renew STACK`, on a schedule, starts
the next node `renewal.lead` before the end. The window helpers here serve the provider's diff,
create and delete and the renew script alike, so all agree on when a node is due.
How it works: docs/renewal.md, "The renewal window (VM backend)".
"""

from __future__ import annotations

import datetime as dt
import shlex
import time

RENEW_MODULE = "scripts.renew"
VENV_PYTHON = ".venv/bin/python"
#: How often `.github/workflows/renew.yml` runs it (a test keeps its cron equal).
SCHEDULE_MINUTES = 15
#: The minute past the hour of its first run. Never 0: GitHub delays and drops scheduled runs
#: at the start of the hour (docs/renewal.md, "The scheduled workflow").
SCHEDULE_OFFSET_MINUTES = 7
#: Scheduled runs allowed to be lost in a row before one notices an expiry: a choice, not a
#: bound GitHub gives.
DROPPED_RUNS_ALLOWED = 1


def schedule_minutes() -> tuple[int, ...]:
    """The minutes past each hour at which the renew workflow runs."""
    if 60 % SCHEDULE_MINUTES or SCHEDULE_OFFSET_MINUTES % SCHEDULE_MINUTES == 0:
        raise ValueError(
            f"SCHEDULE_MINUTES={SCHEDULE_MINUTES} must divide 60 and SCHEDULE_OFFSET_MINUTES="
            f"{SCHEDULE_OFFSET_MINUTES} must not be a multiple of it (no run at minute 0)"
        )
    first = SCHEDULE_OFFSET_MINUTES % SCHEDULE_MINUTES
    return tuple(range(first, 60, SCHEDULE_MINUTES))


def schedule_cron() -> str:
    return f"{','.join(str(m) for m in schedule_minutes())} * * * *"


def detection_seconds() -> int:
    """The longest time from an expiry until a scheduled run sees it, GitHub's delay aside."""
    return (1 + DROPPED_RUNS_ALLOWED) * SCHEDULE_MINUTES * 60


#: The endpoint's A record's TTL: short, since the address changes with every renewal.
RECORD_TTL_SECONDS = 60
#: Beyond the TTL, how long a replaced node keeps serving after the record moved: DNS changes
#: land late, some clients cache longer, and running requests must finish.
DRAIN_MARGIN_SECONDS = 120
#: `renewal.drain`'s default, and the drain of a queued resource created before the key existed.
DEFAULT_DRAIN_SECONDS = RECORD_TTL_SECONDS + DRAIN_MARGIN_SECONDS


def renew_command(stack: str) -> str:
    """The command that renews `stack`, safe any time; with the project's virtualenv, since a
    bare `python` on a fresh machine has none of the program's packages."""
    return f"{VENV_PYTHON} -m {RENEW_MODULE} {shlex.quote(stack)}"


def expiry_notice(
    stack: str,
    max_run_seconds: int | None,
    expires_at: str | None,
    lead_seconds: int | None = None,
) -> str:
    """One line for the end of `pulumi up`: when the node goes away, and how the next starts."""
    command = renew_command(stack)
    if max_run_seconds is None:
        return (
            f"{stack}: this TPU has no run limit (spot or on-demand): it bills until it is "
            f"preempted or destroyed. If it is preempted, `{command}` requests a new one."
        )
    when = f"at {expires_at}" if expires_at else f"{max_run_seconds // 60} minutes after it started"
    schedule = (
        f"(.github/workflows/renew.yml runs it every {SCHEDULE_MINUTES} minutes for the stacks in "
        "RENEW_STACKS)"
    )
    if not lead_seconds:
        return (
            f"{stack}: the flex-start run ends {when}; Google then deletes the VM and the "
            f"endpoint stops answering until `{command}` requests a new node {schedule}."
        )
    start = _before(expires_at, lead_seconds)
    opens = f", at {start}" if start else ""
    return (
        f"{stack}: the flex-start run ends {when}; from {minutes(lead_seconds)} before it "
        f"(renewal.lead{opens}) `{command}` requests the next node beside this one {schedule}, "
        "moves the endpoint to it once it serves and deletes this one a drain later. If no "
        "capacity is found before the end, the endpoint stops answering until the new node serves."
    )


def _before(expires_at: str | None, seconds: float) -> str | None:
    end = _epoch(expires_at)
    if end is None:
        return None
    return dt.datetime.fromtimestamp(end - seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gke_recycle_notice(stack: str, max_run_seconds: int | None, lead_seconds: int = 0) -> str:
    """The GKE backend's line for the end of `pulumi up`: GKE replaces each node itself."""
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


def _epoch(timestamp: str | None) -> float | None:
    """An RFC 3339 time as the TPU API writes it (`...Z`, up to nanoseconds), or None."""
    if not timestamp:
        return None
    try:
        when = dt.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def seconds_left(termination_time: str | None, now: float | None = None) -> float | None:
    end = _epoch(termination_time)
    return None if end is None else end - (time.time() if now is None else now)


def in_window(
    state: str | None,
    termination_time: str | None,
    lead_seconds: float | None,
    now: float | None = None,
) -> bool:
    """True when an ACTIVE node has less than `lead_seconds` of its run left. Ended and unknown
    states are replaced delete-first instead; no lead (spot, on-demand) means never."""
    return due(state, seconds_left(termination_time, now), lead_seconds)


def due(state: str | None, left: float | None, lead_seconds: float | None) -> bool:
    """`in_window`, given the seconds left of the run instead of its end."""
    if state != "ACTIVE" or not lead_seconds:
        return False
    return left is not None and left < float(lead_seconds)


def minutes(seconds: float) -> str:
    """`1 h 5 min`, `42 min`, `30 s` for progress lines: whole minutes above one minute."""
    total = max(round(seconds), 0)
    if total < 60:
        return f"{total} s"
    hours, rest = divmod(round(total / 60), 60)
    return " ".join(p for p in (f"{hours} h" if hours else "", f"{rest} min" if rest else "") if p)
