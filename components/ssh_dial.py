"""How long remote commands dial a node over SSH: pulumi-command's retry budget.

Shared: the VM's connections use it, and config's warning about `access.sshCidrs` states it.
"""

from __future__ import annotations

# A node that has just turned ACTIVE is still booting: dials are refused, or the key is, until the
# guest agent has made the user. pulumi-command 1.2.1 (remote/connection.go `dialWithRetry`,
# pulumi's retry.Until) dials limit+1 times and waits limit times: 100 ms, x1.5, capped at 5 s.
# A fast failure costs ~0 s, so the budget is the waits: 11.3 s for the first 10, then 5 s each:
#   limit 40: 11.3 + 30 x 5 = 161 s;  limit 130: 11.3 + 120 x 5 = 611 s, the ~10 minutes
#   docs/secrets-and-access.md promises. Every dial timing out: 611 + 131 x 10 s = ~32 min.
DIAL_ERROR_LIMIT = 130
PER_DIAL_TIMEOUT_SECONDS = 10
DIAL_FIRST_WAIT_SECONDS = 0.1
DIAL_BACKOFF = 1.5
DIAL_MAX_WAIT_SECONDS = 5.0


def dial_waits(dial_error_limit: int = DIAL_ERROR_LIMIT) -> list[float]:
    """The waits pulumi-command sleeps between the failed dials of one connection."""
    waits, wait = [], DIAL_FIRST_WAIT_SECONDS
    for _ in range(dial_error_limit):
        waits.append(min(wait, DIAL_MAX_WAIT_SECONDS))
        wait *= DIAL_BACKOFF
    return waits


def dial_budget_seconds(
    dial_error_limit: int = DIAL_ERROR_LIMIT, seconds_per_failed_dial: float = 0.0
) -> float:
    """How long pulumi-command dials before it gives up, if each dial fails after
    `seconds_per_failed_dial` (0 when refused, `per_dial_timeout` when it times out)."""
    return sum(dial_waits(dial_error_limit)) + (dial_error_limit + 1) * seconds_per_failed_dial
