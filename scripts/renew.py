"""Renew a tpu-vllm stack before (or once) its flex-start run ends: `python -m scripts.renew STACK`.

A flex-start TPU lives at most `maxRunDuration`, then the endpoint is dead until someone runs
`pulumi up --refresh`. This script is that someone, and it comes early, inside the renewal
window, so clients see no gap when capacity is found in time. It changes something only when
there is something to renew, so it is safe to run at any time. What it decides, and its exit
status: docs/renewal.md "What renews: `scripts/renew.py`".
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from components import renewal
from components.vm.queued_resource_spec import FINAL_STATES, LIVE_STATES
from components.vm.tpu_api import ApiError, TpuApi
from scripts import pulumi_cli

EXIT_RENEW_FAILED = 1
EXIT_UNKNOWN_STATE = 2
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")


class RenewError(Exception):
    """The message names the reason; `status` is the exit status."""

    def __init__(self, message: str, status: int = EXIT_UNKNOWN_STATE) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Decision:
    renew: bool
    reason: str


@dataclass(frozen=True)
class QueuedResource:
    state: str
    #: `runDuration.terminationTime`, if the API gives it.
    termination_time: str | None = None


def decide(
    state: str | None,
    seconds_left: float | None = None,
    lead_seconds: float | None = None,
) -> Decision:
    """Renew inside the renewal window, once ended, or when gone; else leave it alone."""
    if state is None:
        return Decision(True, "gone: there is no queued resource, so a new one is requested")
    if state in FINAL_STATES:
        what = "its run ended and the VM was deleted" if state == "SUSPENDED" else "it failed"
        return Decision(True, f"{state}: {what}; it is replaced by a new request")
    if state == "ACTIVE":
        left = f", {renewal.minutes(seconds_left)} of its run left" if seconds_left else ""
        if renewal.due(state, seconds_left, lead_seconds):
            assert lead_seconds  # due() is never true without a lead
            return Decision(
                True,
                f"ACTIVE{left}, inside the renewal window (renewal.lead "
                f"{renewal.minutes(lead_seconds)}): the next node is requested beside it and "
                "takes over the endpoint once it serves; this one is deleted a drain later",
            )
        when = (
            f"; renewing from {renewal.minutes(lead_seconds)} before the end"
            if lead_seconds
            else ""
        )
        return Decision(False, f"ACTIVE: the node is serving; nothing to do{left}{when}")
    if state in LIVE_STATES:
        return Decision(
            False, f"{state}: the node is on its way up; nothing to do now (not renewing)"
        )
    # LEAVING_STATES (SUSPENDING, DELETING) or unknown: the next run renews once it is final.
    return Decision(False, f"{state}: not ended yet; nothing to do now, the next run checks again")


class Pulumi:
    def __init__(self, stack: str) -> None:
        self.stack = stack
        try:
            self.executable = pulumi_cli.executable()
        except pulumi_cli.PulumiCliError as error:
            raise RenewError(f"{error}, and log in to the stack's backend") from None

    def outputs(self) -> Mapping[str, Any]:
        """Without --show-secrets: secrets stay hidden."""
        try:
            return pulumi_cli.stack_outputs(self.stack)
        except pulumi_cli.PulumiCliError as error:
            raise RenewError(
                f"{error}. Fix: run it from the project directory, logged in to the stack's "
                "backend (`pulumi stack ls`)"
            ) from None

    def up(self) -> None:
        """Its output passed on as it comes: a cold start takes ~15 minutes."""
        args = ["up", "--refresh", "--yes", "-s", self.stack]
        tail: deque[str] = deque(maxlen=50)
        try:
            with subprocess.Popen(
                [self.executable, *args],
                cwd=pulumi_cli.PROJECT_ROOT,
                env=pulumi_cli.environment(),
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            ) as proc:
                assert proc.stderr is not None
                for line in proc.stderr:  # stdout passes through; stderr is kept for the reason
                    sys.stderr.write(line)
                    sys.stderr.flush()
                    tail.append(line)
                status = proc.wait()
        except OSError as error:
            raise RenewError(f"cannot run pulumi: {error}", EXIT_RENEW_FAILED) from None
        if status != 0:
            raise RenewError(
                f"`pulumi {' '.join(args)}` failed (exit status {status}): "
                f"{pulumi_cli.error_reason(''.join(tail), status)}",
                EXIT_RENEW_FAILED,
            )


def queued_resource_state(name: str) -> QueuedResource | None:
    """None when it is gone (404)."""
    try:
        queued = TpuApi().get_queued_resource(name)
    except ApiError as error:
        if error.http_status == 404:
            return None
        raise RenewError(f"the TPU API did not tell the state of {name}: {error}") from None
    except Exception as error:  # noqa: BLE001 - credentials or transport: name it and stop
        raise RenewError(
            f"the TPU API could not be asked about {name}: {type(error).__name__}: {error}. "
            "Fix: `gcloud auth application-default login` (or GOOGLE_OAUTH_ACCESS_TOKEN)"
        ) from None
    return QueuedResource(
        state=str(queued.get("state", {}).get("state") or "STATE_UNSPECIFIED"),
        termination_time=queued.get("runDuration", {}).get("terminationTime") or None,
    )


def renew(stack: str, say: Callable[[str], None] = print) -> int:
    """The process's exit status."""

    def log(message: str) -> None:
        say(f"renew {stack}: {message}")

    try:
        pulumi = Pulumi(stack)
        log(f"reading the stack's outputs (`pulumi stack output --json -s {stack}`)")
        outputs = pulumi.outputs()
        if outputs.get("cluster"):
            log(
                f"a GKE stack (cluster {outputs['cluster']}): GKE replaces each ended TPU node "
                "for its pending pod; nothing to renew"
            )
            return 0
        name = str(outputs.get("queued_resource") or "")
        queued: QueuedResource | None = None
        if name:
            log(f"asking the TPU API for the state of {name}")
            queued = queued_resource_state(name)
        else:
            log("the stack has no queued_resource output (never deployed, or its TPU is gone)")
        lead = _lead_seconds(outputs, log)
        # `expires_at` when the queued resource does not say (the provider read the node's).
        ends = (queued.termination_time if queued else None) or outputs.get("expires_at")
        decision = decide(
            queued.state if queued else None,
            renewal.seconds_left(str(ends)) if ends else None,
            lead,
        )
        log(decision.reason)
        if not decision.renew:
            return 0
        log(f"renewing: `pulumi up --refresh --yes -s {stack}` (a cold start takes ~15 minutes)")
        pulumi.up()
        if queued is not None and queued.state == "ACTIVE" and _kept(pulumi, name):
            log(
                f"{name} is still the stack's node: that `pulumi up` stored settings changed "
                "since its create (tpu.zones, renewal.drain, timing) for its delete to use; "
                f"renewing now: `pulumi up --refresh --yes -s {stack}`"
            )
            pulumi.up()
        log("renewed: `pulumi up` succeeded; its Outputs above show the endpoint and expires_at")
    except RenewError as error:
        print(f"renew {stack}: FAILED: {error}", file=sys.stderr, flush=True)
        return error.status
    return 0


def _kept(pulumi: Pulumi, name: str) -> bool:
    """A renewal names the successor: the other id pair, or another zone."""
    return str(pulumi.outputs().get("queued_resource") or "") == name


def _lead_seconds(outputs: Mapping[str, Any], log: Callable[[str], None]) -> float | None:
    """None without it: renew only once ended."""
    raw = outputs.get("renewal_lead_seconds")
    if raw is None:
        if outputs.get("expires_at"):
            log(
                "the stack has no renewal_lead_seconds output (deployed before renewal windows, "
                "or no run limit): it is renewed once its run has ended; run `pulumi up` once "
                "to renew ahead of the end"
            )
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise RenewError(f"the renewal_lead_seconds output is not a number: {raw!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.renew",
        description=(
            "Renew a tpu-vllm stack when its queued resource is inside its renewal window "
            "(ACTIVE with less than renewal_lead_seconds left), has ended (SUSPENDED, FAILED) or "
            "is gone: runs `pulumi up --refresh --yes -s STACK` then, and nothing otherwise."
        ),
    )
    parser.add_argument("stack", help="the Pulumi stack to renew, e.g. v5e1")
    args = parser.parse_args(argv)
    if not _STACK_NAME.match(args.stack):
        parser.error(f"{args.stack!r} is not a stack name")
    return renew(args.stack, lambda line: print(line, flush=True))


if __name__ == "__main__":
    raise SystemExit(main())
