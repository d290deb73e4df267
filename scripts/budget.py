"""What one `pulumi up` of a stack can cost, in dollars and in time, before you run it.

Why: a TPU bills by the hour and `pulumi up` can block for hours (capacity waits in several
zones, then boot, then a long XLA compile). The README's "Costs and waits" table is this
script's output, and a test checks that it still matches, so the figures follow the stack files,
the catalog and the program's own timeouts. Every figure is read from what the program
registers under Pulumi mocks (like `scripts/plan.py`): the queued resource's capacity wait and
timings, the host-key wait, the SSH dial bounds, the secret fetch's deadline and the readiness
timeout in the rendered remote scripts.

    python scripts/budget.py [STACK ...]      # default: every Pulumi.<stack>.yaml
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from components.queued_resource import Timing  # noqa: E402
from components.ssh import dial_budget_seconds  # noqa: E402
from scripts.plan import PLACEHOLDER_PROJECT, after_apply  # noqa: E402
from scripts.program_runner import ProgramRun, run_program, stack_file_config  # noqa: E402

COMMAND = "command:remote:Command"
DYNAMIC = "pulumi-python:dynamic:Resource"


@dataclass(frozen=True)
class Budget:
    """One stack's money and time bounds, each figure from the program's registered inputs."""

    stack: str
    chip: str
    provisioning: str
    hourly_usd: float
    max_run_hours: float | None
    max_run_usd: float | None
    zones: int
    capacity_wait_s: float
    provisioning_s: float
    zone_delete_s: float
    host_key_s: float
    dial_limit: int
    dial_timeout_s: float
    secrets_s: float
    readiness_s: float

    @property
    def ssh_s(self) -> float:
        """pulumi-command's dial retries when every dial times out (components/ssh.py)."""
        return dial_budget_seconds(self.dial_limit, self.dial_timeout_s)

    @property
    def after_capacity_s(self) -> float:
        """From ACTIVE to a verified endpoint: host key, first SSH dial, secrets, readiness."""
        return self.host_key_s + self.ssh_s + self.secrets_s + self.readiness_s

    @property
    def worst_case_s(self) -> float:
        """The longest `pulumi up` can block: every zone waits out its capacity wait and
        provisioning bound, each refused zone's request is deleted (up to the delete bound,
        since a PROVISIONING request cannot be deleted), and the last zone succeeds at its
        bound; or every zone fails, whichever is longer."""
        per_zone = self.capacity_wait_s + self.provisioning_s
        success_last = (
            self.zones * per_zone + (self.zones - 1) * self.zone_delete_s + self.after_capacity_s
        )
        all_fail = self.zones * (per_zone + self.zone_delete_s)
        return max(success_last, all_fail)


def _one(run: ProgramRun, type_: str, name: str) -> dict[str, Any]:
    [found] = [r for r in run.resources if r.type == type_ and r.name == name]
    return found.inputs


def _unsecret(value: Any) -> Any:
    """Inputs that hold a secret arrive wrapped as {sig: ..., value: ...}."""
    if isinstance(value, dict) and "value" in value and len(value) == 2:
        return value["value"]
    return value


def _script_number(script: str, pattern: str) -> float:
    match = re.search(pattern, script)
    assert match, f"{pattern!r} not found in a rendered remote script"
    return float(match.group(1))


def budget(stack: str, changes: Mapping[str, Any] | None = None) -> Budget:
    """Read the figures from what the program registers for `stack` (with config `changes`)."""
    project = None if stack_file_config(stack).get("gcp:project") else PLACEHOLDER_PROJECT
    run = run_program(stack, changes, project=project, outputs_for=after_apply)
    qr = _one(run, DYNAMIC, "tpu-qr")
    host_key = _one(run, DYNAMIC, "node-host-key")
    fetch = _one(run, COMMAND, "secrets-fetch")
    ready = _one(run, COMMAND, "vllm-ready")
    connection = _unsecret(fetch["connection"])
    timing = Timing.from_props(qr.get("timing"))
    max_run = qr.get("max_run_seconds")
    max_run_usd = run.outputs.get("max_run_cost_usd")  # optional output: absent without a bound
    return Budget(
        stack=stack,
        chip=str(run.outputs["chip"]),
        provisioning=str(qr["provisioning"]),
        hourly_usd=float(run.outputs["hourly_cost_usd"]),
        max_run_hours=float(max_run) / 3600 if max_run else None,
        max_run_usd=float(max_run_usd) if max_run_usd is not None else None,
        zones=len(qr["zones"]),
        capacity_wait_s=float(qr["capacity_wait_seconds"]),
        provisioning_s=timing.provisioning_timeout_seconds,
        zone_delete_s=timing.delete_timeout_seconds,
        host_key_s=float(host_key["timeout_seconds"]),
        dial_limit=int(connection["dialErrorLimit"]),
        dial_timeout_s=float(connection["perDialTimeout"]),
        secrets_s=_script_number(str(fetch["create"]), r"deadline_seconds=(\d+)"),
        readiness_s=_script_number(str(ready["create"]), r"--timeout (\d+)"),
    )


def duration(seconds: float) -> str:
    """`1 h 53 min 20 s`, `30 min`, `40 s`: whole units only."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    parts.append(f"{secs} s" if secs or not total else "")
    return " ".join(p for p in parts if p)


def _usd(value: float) -> str:
    return f"${value:.3f}".rstrip("0").rstrip(".") if value < 1 else f"${value:.2f}"


def render_table(stacks: list[str]) -> str:
    """The README's "Costs and waits" table: one column per stack."""
    budgets = [budget(s) for s in stacks]
    rows: list[tuple[str, list[str]]] = [
        ("TPU, provisioning", [f"`{b.chip}`, {b.provisioning}" for b in budgets]),
        ("price per hour (`hourly_cost_usd`)", [_usd(b.hourly_usd) for b in budgets]),
        (
            "the most one run can cost (`max_run_cost_usd`)",
            [
                f"{_usd(b.max_run_usd)} ({b.max_run_hours:g} h `maxRunDuration`)"
                if b.max_run_usd is not None and b.max_run_hours is not None
                else "no bound: bills until `pulumi destroy`"
                for b in budgets
            ],
        ),
        ("zones tried (`tpu.zones`)", [str(b.zones) for b in budgets]),
        (
            "capacity wait per zone (`tpu.capacityWait`)",
            [duration(b.capacity_wait_s) for b in budgets],
        ),
        ("provisioning bound per zone", [duration(b.provisioning_s) for b in budgets]),
        (
            "deleting a refused zone's request, at most",
            [duration(b.zone_delete_s) for b in budgets],
        ),
        ("SSH host key (guest attributes)", [duration(b.host_key_s) for b in budgets]),
        (
            "first SSH connection, every dial timing out",
            [
                f"{b.dial_limit + 1} dials x {b.dial_timeout_s:g} s + backoff = {duration(b.ssh_s)}"
                for b in budgets
            ],
        ),
        ("secret fetch (IAM propagation)", [duration(b.secrets_s) for b in budgets]),
        ("readiness (`vllm.readinessTimeout`)", [duration(b.readiness_s) for b in budgets]),
        ("**worst case `pulumi up` blocks**", [f"**{duration(b.worst_case_s)}**" for b in budgets]),
    ]
    lines = [
        "| | " + " | ".join(f"`{b.stack}`" for b in budgets) + " |",
        "|---|" + "---|" * len(budgets),
    ]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines) + "\n"


def all_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


README = ROOT / "README.md"
BEGIN = "<!-- budget: generated by `.venv/bin/python scripts/budget.py --update-readme` -->\n"
END = "<!-- budget: end -->\n"


def readme_table(text: str) -> str:
    """The generated table as it stands in the README."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END, start)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("stacks", nargs="*", help="stack names (default: every stack file)")
    parser.add_argument(
        "--update-readme",
        action="store_true",
        help="replace the table in README.md (for every stack) instead of printing it",
    )
    args = parser.parse_args(argv)
    if args.update_readme:
        text = README.read_text()
        table = render_table(all_stacks())
        README.write_text(text.replace(BEGIN + readme_table(text) + END, BEGIN + table + END))
        return 0
    sys.stdout.write(render_table(args.stacks or all_stacks()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
