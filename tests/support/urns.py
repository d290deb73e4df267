"""Every stack's resource list as the Pulumi engine names it, for the "no replacement" test.

A resource's URN is its identity in a stack's state: `urn:pulumi:STACK::PROJECT::TYPE::NAME`,
where TYPE is the type token prefixed by the qualified types of its parent chain
(`Parent$Child$type`), the root stack left out (pulumi/pulumi `sdk/go/common/resource/urn.go`
`NewURN`, called with the parent's `QualifiedType()` by `pkg/resource/deploy/deployment.go`
`generateURN`). Renaming, retyping or reparenting a resource changes its URN, and the engine
then deletes the old one and creates a new one: a TPU replaced, an endpoint down. So the URNs of
each case below are stored (tests/support/fixtures/urns/CASE.txt, written from the code before a
refactor) and `tests/mocked/test_urns.py` compares the program's against them.

The mock monitor's own URNs (pulumi/runtime/mocks.py `make_urn`) keep only the parent's last
type and add `pulumi:pulumi:Stack$` to top-level resources, so the engine's are rebuilt here
from each RegisterResource request's type, name and parent. A custom resource with an explicit
provider also lists that provider's URN (`  provider=URN`): moving a resource to another
provider replaces it too.

    python -m tests.support.urns --write    # regenerate the fixtures (only when a change is meant)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi.runtime import mocks

from scripts.program_runner import GET_MANAGED_ZONE, Registration, managed_zone_lookup
from tests.support.mock_outputs import MANAGED_ZONE, MANAGED_ZONES, existing_cluster
from tests.support.pulumi_program import ROOT, run_program

FIXTURES = ROOT / "tests" / "support" / "fixtures" / "urns"
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def existing_cluster_and_zones(args: mocks.MockCallArgs) -> dict[str, Any]:
    """An existing GKE cluster fit for the stack (what `gke.cluster` looks up,
    `mock_outputs.existing_cluster`), and the test project's Cloud DNS zones."""
    if args.token == GET_MANAGED_ZONE:
        return managed_zone_lookup(MANAGED_ZONES)(args)
    answer: dict[str, Any] = existing_cluster()(args)
    return answer


@dataclass(frozen=True)
class Case:
    """A stack file, and the config changes that change which resources it has."""

    stack: str
    changes: Mapping[str, Any] = field(default_factory=dict)
    call: Callable[[mocks.MockCallArgs], dict[str, Any]] | None = None


DNS = {"tpu-vllm:dns.managedZone": MANAGED_ZONE}
CACHE_OFF = {"tpu-vllm:cache.enabled": False}
CACHE_BUCKET = {"tpu-vllm:cache.bucket": "team-xla-cache"}

#: Every stack file, and each config that adds or removes resources from it. (Spot
#: provisioning, `access.allowUnverifiedHostKey` and `gke.replicas` change no resource's URN.)
CASES: Mapping[str, Case] = {
    "v5e1": Case("v5e1"),
    "v5e1-dns": Case("v5e1", DNS),
    "v5e1-cache-off": Case("v5e1", CACHE_OFF),
    "v5e1-cache-bucket": Case("v5e1", CACHE_BUCKET),
    "v6e4": Case("v6e4"),
    "v6e4-dns-cache-off": Case("v6e4", {**DNS, **CACHE_OFF}),
    "v6e4-gke": Case("v6e4-gke"),
    "v6e4-gke-dns": Case("v6e4-gke", DNS),
    "v6e4-gke-cache-off": Case("v6e4-gke", CACHE_OFF),
    "v6e4-gke-cache-bucket": Case("v6e4-gke", CACHE_BUCKET),
    "v6e4-gke-existing-cluster": Case(
        "v6e4-gke", {"tpu-vllm:gke.cluster": "shared", **DNS}, existing_cluster_and_zones
    ),
}


def engine_urns(registrations: Sequence[Registration]) -> list[str]:
    """The sorted URNs (and explicit providers) a real engine would give these registrations."""
    by_mock_urn: dict[str, str] = {}
    lines: list[str] = []
    for reg in registrations:
        if reg.type == ROOT_STACK_TYPE:
            by_mock_urn[reg.urn] = ""  # the root stack's type never prefixes a child's
            continue
        if reg.urn in by_mock_urn:
            raise AssertionError(f"two resources share the mock URN {reg.urn}")
        parent_qualified = _qualified_type(by_mock_urn[reg.parent]) if reg.parent else ""
        prefix = f"{parent_qualified}$" if parent_qualified else ""
        urn = f"{_urn_head(reg.urn)}::{prefix}{reg.type}::{reg.name}"
        by_mock_urn[reg.urn] = urn
        line = urn
        if reg.provider:
            provider_urn = reg.provider.rsplit("::", 1)[0]
            line += f"  provider={by_mock_urn.get(provider_urn, provider_urn)}"
        lines.append(line)
    return sorted(lines)


def _urn_head(urn: str) -> str:
    """`urn:pulumi:STACK::PROJECT`."""
    return "::".join(urn.split("::")[:2])


def _qualified_type(urn: str) -> str:
    """The `A$B$type` part of an engine URN; "" for the root stack."""
    return urn.split("::")[2] if urn else ""


def case_urns(name: str) -> list[str]:
    case = CASES[name]
    return engine_urns(run_program(case.stack, case.changes, call=case.call).registrations)


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.txt"


def read_fixture(name: str) -> list[str]:
    return [line for line in fixture(name).read_text().splitlines() if line]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the fixtures")
    parser.add_argument("cases", nargs="*", default=list(CASES))
    args = parser.parse_args(argv)
    changed = 0
    for name in args.cases:
        urns = case_urns(name)
        if args.write:
            FIXTURES.mkdir(parents=True, exist_ok=True)
            fixture(name).write_text("\n".join(urns) + "\n")
            print(f"{fixture(name).relative_to(ROOT)}: {len(urns)} resources")
        elif not fixture(name).exists() or urns != read_fixture(name):
            changed += 1
            print(f"{name}: differs from {fixture(name).relative_to(ROOT)}", file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
