"""A credential-free plan of a stack, for every pull request, forks included.

`pulumi preview` needs cloud credentials and a state backend, which a fork's pull request must
never get. This runs the real program under Pulumi mocks and prints a deterministic plan, so
diffing the plans of the base and head commits shows a reviewer exactly what a change does.
What it shows: docs/preview.md "The two jobs".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import shlex
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pulumi.runtime import mocks

from components import image_ref
from components.config import ConfigError, StackConfig, parse_stack_config
from components.messages import operator_line
from components.vm.queued_resource_spec import OUTPUT_KEYS
from scripts.program_runner import (
    GET_MANAGED_ZONE,
    ProgramRun,
    run_program,
    stack_file_config,
    with_changes,
)
from scripts.stack_files import StackFileError, resolve_stack

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER_PROJECT = "YOUR-PROJECT"
PROG = "plan"
HASH_CHARS = 12
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # noqa: S105 - the SDK marks secrets with it
MASK = "[secret]"
# Outputs a real `pulumi up` learns from the cloud; the plan names them instead.
AFTER_APPLY: Mapping[str, tuple[str, ...]] = {
    "gcp:serviceaccount/account:Account": ("email",),
    "tls:index/privateKey:PrivateKey": ("publicKeyOpenssh", "privateKeyOpenssh"),
    "random:index/randomPassword:RandomPassword": ("result",),
    "gcp:secretmanager/secret:Secret": ("name",),
    "gcp:secretmanager/secretVersion:SecretVersion": ("name",),
    "command:remote:Command": ("stdout", "stderr"),
    "gcp:container/cluster:Cluster": ("endpoint",),
    "gcp:compute/address:Address": ("address",),
}


def after_apply(args: mocks.MockResourceArgs) -> dict[str, Any]:
    """Deterministic stand-ins for values only the cloud knows, named for what they are."""
    fields: tuple[str, ...] = AFTER_APPLY.get(args.typ, ())
    if args.typ == "pulumi-python:dynamic:Resource" and "reference" in args.inputs:
        # The image pin: a digest reference is its own; a tag is resolved by the real up.
        if args.inputs.get("digest"):
            return {}
        digest = f"<{args.name}.digest>"
        name = image_ref.parse(str(args.inputs["reference"])).name
        return {"digest": digest, "image": f"{name}@{digest}"}
    if args.typ == "pulumi-python:dynamic:Resource":
        fields = (
            OUTPUT_KEYS
            if "qr_id" in args.inputs
            else ("host_key",)
            if "node_create_time" in args.inputs
            else ("served", "waited_seconds")  # the GKE CRD wait
        )
    return {f: f"<{args.name}.{f}>" for f in fields}


def _mask(value: Any) -> Any:
    if isinstance(value, Mapping):
        if SECRET_SIG in value.values():
            return MASK
        return {str(k): _mask(v) for k, v in sorted(value.items()) if k != "__provider"}
    if isinstance(value, (list, tuple)):
        return [_mask(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # numbers cross the engine as floats: show 48, not 48.0
    return value


def content_hash(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()[:HASH_CHARS]


class Scripts:
    """Each remote script is shown once, at the first `resource.field` holding it in name order;
    elsewhere (the `triggers`) it is named by that place and its content hash."""

    def __init__(self, resources: list[tuple[str, Mapping[str, Any]]]) -> None:
        self.home: dict[str, str] = {}
        for name, inputs in resources:
            for key, value in inputs.items():
                if _is_script(value):
                    self.home.setdefault(value, f"{name}.{key}")
        self.shown: set[str] = set()

    def header(self, script: str, where: str) -> str | None:
        """None where the script is only referenced."""
        if self.home.get(script, where) != where or script in self.shown:
            return None
        self.shown.add(script)
        count = len(script.splitlines())
        return f" script {where} (sha256 {content_hash(script)}, {count} lines) |"

    def reference(self, script: str) -> str:
        home = self.home.get(script, "(inline)")
        return f"[script {home}, sha256 {content_hash(script)}]"


def _is_script(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value


def _render_value(value: Any, indent: str, scripts: Scripts, where: str) -> list[str]:
    """Scripts and structures spread over lines, so diffs stay local."""
    if _is_script(value):
        header = scripts.header(value, where)
        if header is None:
            return [" " + scripts.reference(value)]
        return [header] + [f"{indent}  {line}".rstrip() for line in value.splitlines()]
    if isinstance(value, Mapping) and value:
        lines = [""]
        for key, item in value.items():
            rendered = _render_value(item, indent + "  ", scripts, f"{where}.{key}")
            lines.append(f"{indent}  {key}:{rendered[0]}")
            lines.extend(rendered[1:])
        return lines
    if isinstance(value, list) and any(
        isinstance(v, (Mapping, list)) or _is_script(v) for v in value
    ):
        lines = [""]
        for index, item in enumerate(value):
            rendered = _render_value(item, indent + "  ", scripts, f"{where}[{index}]")
            lines.append(f"{indent}  -{rendered[0]}")
            lines.extend(rendered[1:])
        return lines
    return [" " + json.dumps(value, sort_keys=True)]


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    return (
        "".join(part for part in (f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""))
        or f"{seconds}s"
    )


def usd(value: float) -> str:
    """`$0.602`, `$5.40`: the README's and the budget's spelling of a price."""
    return f"${value:.3f}".rstrip("0").rstrip(".") if value < 1 else f"${value:.2f}"


def render_summary(config: StackConfig, args: list[str]) -> list[str]:
    """What a reader checks first: what is asked for, where, for how long, at what price."""
    tpu = config.tpu
    if tpu.max_run_seconds is not None:
        provisioning = f"{tpu.provisioning}, at most {_duration(tpu.max_run_seconds)} per run"
        cost = (
            f"{usd(config.hourly_cost_usd)}/h; at most {usd(config.max_run_cost_usd or 0)} per "
            "run (it stops billing on its own)"
        )
    else:
        provisioning = f"{tpu.provisioning}, no run limit"
        cost = f"{usd(config.hourly_cost_usd)}/h, billed until `pulumi destroy` (no run limit)"
    zones = (
        f"  zones: {', '.join(tpu.zones)} (in this order; each may queue "
        f"{_duration(tpu.capacity_wait_seconds)} for capacity)"
    )
    backend: list[str] = []
    if config.backend == "gke":
        gke = config.gke
        where = gke.existing_cluster or f"created, {gke.location}"
        backend = [f"  backend: gke, {gke.replicas} replica(s), cluster {where}"]
        zones = (
            f"  zones: {', '.join(tpu.zones)} (any of them; the node pool may wait "
            f"{_duration(tpu.capacity_wait_seconds)} for a first node)"
        )
        each = config.hourly_cost_usd / gke.replicas
        if config.max_run_cost_usd is not None:
            cost = (
                f"${config.hourly_cost_usd:.2f}/h ({gke.replicas} x ${each:.2f}); at most "
                f"${config.max_run_cost_usd:.2f} per run of every node (GKE replaces an ended "
                "node, so it bills until `pulumi destroy`)"
            )
        else:
            cost = (
                f"${config.hourly_cost_usd:.2f}/h ({gke.replicas} x ${each:.2f}), billed until "
                "`pulumi destroy` (no run limit)"
            )
    lines = [
        "summary:",
        f"  stack: {config.stack} (Pulumi.{config.stack}.yaml)",
        *backend,
        f"  project: {config.project}",
        f"  chip: {tpu.chip.name} ({tpu.chip.accelerator_type}, runtime {tpu.runtime_version})",
        zones,
        f"  model: {config.model.id} ({config.model.weights_gib:.2f} GiB of weights)",
        f"  provisioning: {provisioning}",
        f"  cost: {cost}",
        f"  image: {config.vllm.image}, port {config.vllm.port}",
        f"  vllm serve {config.model.id}",
    ]
    flags: list[str] = []
    for arg in args:
        if arg.startswith("-") or not flags:
            flags.append(arg)
        else:
            flags[-1] += f" {shlex.quote(arg)}"
    lines.extend(f"    {flag}" for flag in flags)
    return lines


def _summary_and_warnings(run: ProgramRun, config: StackConfig | None) -> list[str]:
    lines: list[str] = []
    if config is not None:
        lines.extend(render_summary(config, list(run.outputs.get("vllm_args") or [])))
        lines.append("")
    if run.warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in run.warnings)
        lines.append("")
    return lines


BRIEF_WIDTH = 96


def render_brief(run: ProgramRun, stack: str, config: StackConfig | None = None) -> str:
    """`--summary`: what a reader checks before anything else."""
    lines = [
        f"# tpu-vllm plan for stack {stack}, in brief (the full plan adds its "
        f"{len(run.resources)} resources)",
        "# made under Pulumi mocks: no credentials, no network",
        "",
        *_summary_and_warnings(run, config),
        f"outputs ({len(run.outputs)}; after `pulumi up`: pulumi stack output NAME -s {stack}, "
        "a [secret] with --show-secrets):",
    ]
    names = [
        f"{name}\N{NO-BREAK SPACE}[secret]" if name in run.secret_outputs else name
        for name in sorted(run.outputs)
    ]
    wrapped = textwrap.wrap(
        ", ".join(names),
        width=BRIEF_WIDTH,
        initial_indent="  ",
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    lines.extend(line.replace("\N{NO-BREAK SPACE}", " ") for line in wrapped)
    return "\n".join(lines) + "\n"


def render_plan(run: ProgramRun, stack: str, config: StackConfig | None = None) -> str:
    """Summary, warnings, resources sorted by name, then outputs."""
    lines = [
        f"# tpu-vllm plan for stack {stack}",
        "# made under Pulumi mocks: no credentials, no network; <name.field> is known after apply",
        "",
        *_summary_and_warnings(run, config),
    ]
    lines.append(f"resources ({len(run.resources)}):")
    ordered = sorted(run.resources, key=lambda r: (r.name, r.type))
    masked = [(r, _mask(r.inputs)) for r in ordered]
    scripts = Scripts([(r.name, inputs) for r, inputs in masked])
    for resource, inputs in masked:
        lines.append("")
        lines.append(f"{resource.name}  ({resource.type})")
        for key, value in inputs.items():
            rendered = _render_value(value, "  ", scripts, f"{resource.name}.{key}")
            lines.append(f"  {key}:{rendered[0]}")
            lines.extend(rendered[1:])
    lines.append("")
    lines.append("outputs:")
    for name in sorted(run.outputs):
        if name in run.secret_outputs:
            shown = MASK
        elif name == "vllm_args":
            names = {r.name for r in run.resources}
            where = "vllm-start" if "vllm-start" in names else "vllm-deployment"
            shown = f"(the `vllm serve` flags in {where} above)"
        else:
            shown = json.dumps(run.outputs[name], sort_keys=True)
        lines.append(f"  {name}: {shown}")
    return "\n".join(lines) + "\n"


def plan(
    stack: str,
    *,
    project: str | None = None,
    changes: Mapping[str, Any] | None = None,
    outputs_for: Callable[[mocks.MockResourceArgs], dict[str, Any]] = after_apply,
) -> str:
    run, config = run_for_plan(stack, project=project, changes=changes, outputs_for=outputs_for)
    return render_plan(run, stack, config)


def run_for_plan(
    stack: str,
    *,
    project: str | None = None,
    changes: Mapping[str, Any] | None = None,
    outputs_for: Callable[[mocks.MockResourceArgs], dict[str, Any]] = after_apply,
) -> tuple[ProgramRun, StackConfig]:
    """Run the program for `stack` under mocks: what `render_plan` and `render_brief` show."""

    def lookup_only(args: mocks.MockCallArgs) -> dict[str, Any]:
        # The HF secret and a dns.managedZone are assumed to exist; preview checks them for
        # real. Only Cloud DNS knows the zone's DNS name.
        if args.token == GET_MANAGED_ZONE:
            return {**dict(args.args), "dnsName": f"<{args.args.get('name')}.dnsName>."}
        return dict(args.args)

    raw = stack_file_config(stack)
    if project is None and not raw.get("gcp:project"):
        project = PLACEHOLDER_PROJECT  # the stack file leaves it to `pulumi config set`
    config = summary_config(stack, project, changes)
    run = run_program(stack, changes, project=project, outputs_for=outputs_for, call=lookup_only)
    return run, config


def summary_config(
    stack: str, project: str | None, changes: Mapping[str, Any] | None
) -> StackConfig:
    """The stack's validated config, as the program reads it (a ConfigError if it is bad)."""
    raw = with_changes(stack_file_config(stack), changes or {})
    if project is not None:
        raw["gcp:project"] = project
    prefix = "tpu-vllm:"
    sections = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}
    return parse_stack_config(sections, project=raw.get("gcp:project"), stack=stack)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.plan",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Exit status: 0 every plan was made, 1 a stack's program failed (its config "
        "error is printed), 2 no such stack.",
    )
    parser.add_argument(
        "stacks",
        nargs="+",
        metavar="STACK",
        help="stack name (v5e1) or stack file (Pulumi.v5e1.yaml); several give several plans",
    )
    parser.add_argument(
        "--project",
        help=f"gcp:project to assume (default: the stack file's, else {PLACEHOLDER_PROJECT})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write the full plan(s) to this file instead of stdout (default: stdout)",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print only each plan's summary, warnings and output names to stdout (with --out, "
        "the full plan(s) still go to FILE)",
    )
    args = parser.parse_args(argv)
    try:
        stacks = [resolve_stack(arg, ROOT) for arg in args.stacks]
    except StackFileError as error:
        print(operator_line(PROG, f"error: {error}"), file=sys.stderr)
        return 2
    texts: list[str] = []
    briefs: list[str] = []
    status = 0
    for stack in stacks:
        try:
            run, config = run_for_plan(stack, project=args.project)
            texts.append(render_plan(run, stack, config))
            briefs.append(render_brief(run, stack, config))
        except ConfigError as error:
            print(f"{PROG}: {stack}: {error}", file=sys.stderr)
            status = 1
        except Exception as error:  # noqa: BLE001 - the program's own failure is the answer
            print(
                operator_line(PROG, f"error: {stack}: the program failed: {error}"), file=sys.stderr
            )
            status = 1
    text = "\n".join(texts)
    if args.out:
        write_whole(args.out, text)
    if args.summary:
        sys.stdout.write("\n".join(briefs))
    elif not args.out:
        sys.stdout.write(text)
    return status


def write_whole(path: Path, text: str) -> None:
    """A regular file is replaced at once, so another run's reader never sees half of it."""
    if path.exists() and not path.is_file():  # /dev/stdout, a pipe
        path.write_text(text)
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    partial.replace(path)


def close_idle_event_loops() -> None:
    """Close the loops the SDK's `_sync_await` opened and never closed: left to the exit, one in
    four runs printed "Exception ignored in: <function BaseEventLoop.__del__>" and a traceback."""
    for found in gc.get_objects():
        if isinstance(found, asyncio.BaseEventLoop) and not found.is_running():
            found.close()


if __name__ == "__main__":
    exit_status = main()
    close_idle_event_loops()
    raise SystemExit(exit_status)
