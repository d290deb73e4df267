"""How long remote commands dial a node over SSH: pulumi-command's retry budget.

Shared: the VM backend's connections use these limits (components/vm/ssh.py), and the config
loader states the budget in its warning about `access.sshCidrs` (components/config/access.py),
which must not import the VM backend to do so.
"""

from __future__ import annotations

# How long remote commands keep dialling a node that has just turned ACTIVE. It is still booting:
# first the TCP connect times out or is refused, then sshd answers but refuses the key until the
# guest agent has created the user. pulumi-command 1.2.1 (`provider/pkg/provider/remote/
# connection.go`, `dialWithRetry`) retries every failed dial through pulumi's `retry.Until`
# (`sdk/go/common/util/retry/until.go`): first wait 100 ms, each next wait x1.5, capped at 5 s;
# attempt N+1 fails for good once N+1 > dial_error_limit, so it dials limit+1 times and waits
# limit times. `per_dial_timeout` bounds each TCP connect only (golang.org/x/crypto/ssh `Dial`).
# A fast failure (refused, or auth failing before the user exists) costs ~0 s, so the budget is
# the waits alone:
#   waits 1-10: 0.1 x (1.5^10 - 1) / 0.5 = 11.3 s; waits 11..limit: 5 s each.
#   old limit 40:  11.3 + 30 x 5  = 161 s, under 3 minutes;
#   limit 130:     11.3 + 120 x 5 = 611 s, the ~10 minutes docs/secrets-and-access.md promises.
# If every dial times out instead, each also costs per_dial_timeout: 611 + 131 x 10 = 1921 s,
# so a node that never answers fails the command after ~32 minutes, not never.
DIAL_ERROR_LIMIT = 130
PER_DIAL_TIMEOUT_SECONDS = 10
#: pulumi-command's dial backoff (see above).
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
    """How long pulumi-command keeps dialling before it gives up, if every dial fails after
    `seconds_per_failed_dial` (0 for refused or denied, `per_dial_timeout` for timeouts)."""
    return sum(dial_waits(dial_error_limit)) + (dial_error_limit + 1) * seconds_per_failed_dial
