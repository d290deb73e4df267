"""A credential-free plan of a stack, for every pull request, forks included.

`pulumi preview` needs cloud credentials and a state backend, which a fork's pull request must
never get. This runs the real program under Pulumi mocks, with no credentials and no network,
and prints a deterministic, readable plan: each resource with its inputs, the remote scripts
one flag per line, secrets masked. Diffing the plans of the base and head commits shows a
reviewer exactly what a change does (`.github/workflows/preview.yml` does that).

    python scripts/plan.py v5e1 [--project P] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# `python scripts/plan.py` puts scripts/ first on sys.path; the program's packages live at the
# project root.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pulumi.runtime import mocks  # noqa: E402

from components.queued_resource import OUTPUT_KEYS  # noqa: E402
from scripts.program_runner import (  # noqa: E402
    GET_MANAGED_ZONE,
    ProgramRun,
    run_program,
    stack_file_config,
)

PLACEHOLDER_PROJECT = "YOUR-PROJECT"
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
}


def after_apply(args: mocks.MockResourceArgs) -> dict[str, Any]:
    """Deterministic stand-ins for values only the cloud knows, named for what they are."""
    fields: tuple[str, ...] = AFTER_APPLY.get(args.typ, ())
    if args.typ == "pulumi-python:dynamic:Resource":
        fields = OUTPUT_KEYS if "qr_id" in args.inputs else ("host_key",)
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


def _render_value(value: Any, indent: str) -> list[str]:
    """One line for scalars; scripts and structures spread over lines so diffs stay local."""
    if isinstance(value, str) and "\n" in value:
        return [" |"] + [f"{indent}  {line}".rstrip() for line in value.splitlines()]
    if isinstance(value, Mapping) and value:
        lines = [""]
        for key, item in value.items():
            rendered = _render_value(item, indent + "  ")
            lines.append(f"{indent}  {key}:{rendered[0]}")
            lines.extend(rendered[1:])
        return lines
    if isinstance(value, list) and value and any(isinstance(v, (Mapping, list)) for v in value):
        lines = [""]
        for item in value:
            rendered = _render_value(item, indent + "  ")
            lines.append(f"{indent}  -{rendered[0]}")
            lines.extend(rendered[1:])
        return lines
    return [" " + json.dumps(value, sort_keys=True)]


def render_plan(run: ProgramRun, stack: str) -> str:
    """The plan text: warnings, resources sorted by name, then outputs."""
    lines = [
        f"# tpu-vllm plan for stack {stack}",
        "# made under Pulumi mocks: no credentials, no network; <name.field> is known after apply",
        "",
    ]
    if run.warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in run.warnings)
        lines.append("")
    lines.append(f"resources ({len(run.resources)}):")
    for resource in sorted(run.resources, key=lambda r: (r.name, r.type)):
        lines.append("")
        lines.append(f"{resource.name}  ({resource.type})")
        inputs = _mask(resource.inputs)
        for key, value in inputs.items():
            rendered = _render_value(value, "  ")
            lines.append(f"  {key}:{rendered[0]}")
            lines.extend(rendered[1:])
    lines.append("")
    lines.append("outputs:")
    for name in sorted(run.outputs):
        if name in run.secret_outputs:
            shown = MASK
        elif name == "vllm_args":
            shown = "(the `vllm serve` flags in vllm-start above)"
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
    """Run the program for `stack` under mocks and render its plan."""

    def lookup_only(args: mocks.MockCallArgs) -> dict[str, Any]:
        # The HF secret and a dns.managedZone are assumed to exist; preview checks them for
        # real. Only Cloud DNS knows the zone's DNS name.
        if args.token == GET_MANAGED_ZONE:
            return {**dict(args.args), "dnsName": f"<{args.args.get('name')}.dnsName>."}
        return dict(args.args)

    if project is None and not stack_file_config(stack).get("gcp:project"):
        project = PLACEHOLDER_PROJECT  # the stack file leaves it to `pulumi config set`
    run = run_program(stack, changes, project=project, outputs_for=outputs_for, call=lookup_only)
    return render_plan(run, stack)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("stack", help="stack name: a Pulumi.<stack>.yaml must exist")
    parser.add_argument(
        "--project",
        help=f"gcp:project to assume (default: the stack file's, else {PLACEHOLDER_PROJECT})",
    )
    parser.add_argument("--out", type=Path, help="write the plan here instead of stdout")
    args = parser.parse_args(argv)
    if not (ROOT / f"Pulumi.{args.stack}.yaml").exists():
        print(f"plan: no Pulumi.{args.stack}.yaml in {ROOT}", file=sys.stderr)
        return 2
    try:
        text = plan(args.stack, project=args.project)
    except Exception as error:  # noqa: BLE001 - a config error is the plan's answer
        print(f"plan: {args.stack}: {error}", file=sys.stderr)
        return 1
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
