"""Every stack keeps its resources: same URNs (name, type, parent chain) and same providers.

The fixtures (tests/support/fixtures/urns/) were written by `python -m tests.support.urns --write`
from the code before `components/` was split into `vm/`, `gke/` and `config/`; a refactor that
renames, retypes or reparents a resource would make an existing stack replace it
(tests/support/urns.py).
"""

from __future__ import annotations

import pytest

from scripts.program_runner import Registration
from tests.support.pulumi_program import ROOT
from tests.support.urns import CASES, FIXTURES, case_urns, engine_urns, read_fixture


@pytest.mark.parametrize("name", sorted(CASES))
def test_resource_urns_are_unchanged(name: str) -> None:
    now, stored = case_urns(name), read_fixture(name)
    gone = sorted(set(stored) - set(now))
    new = sorted(set(now) - set(stored))
    assert not gone and not new, (
        f"{name}: an existing stack would delete {gone} and create {new}. If the change is "
        "meant (and a replacement is acceptable), rewrite with "
        "`python -m tests.support.urns --write`."
    )
    assert now == stored


def test_every_stack_file_has_a_case() -> None:
    stacks = {path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in ROOT.glob("*")}
    stacks = {s for s in stacks if s and (ROOT / f"Pulumi.{s}.yaml").is_file()}
    assert stacks == {case.stack for case in CASES.values()}
    assert {p.stem for p in FIXTURES.glob("*.txt")} == set(CASES)


def test_engine_urns_carry_the_whole_parent_chain_and_skip_the_root_stack() -> None:
    """pulumi/pulumi `sdk/go/common/resource/urn.go` `NewURN`: the parent's qualified type (its
    whole chain) prefixes the type, the root stack's never does."""
    head = "urn:pulumi:s::p"
    stack = f"{head}::pulumi:pulumi:Stack::p-s"
    # The mock monitor's URNs: only the parent's last type, and the stack's type at the top.
    outer = f"{head}::pulumi:pulumi:Stack$a:index:Outer::outer"
    inner = f"{head}::a:index:Outer$a:index:Inner::inner"
    leaf = f"{head}::a:index:Inner$gcp:x/y:Y::leaf"
    provider = f"{head}::a:index:Outer$pulumi:providers:kubernetes::k8s"
    registrations = [
        Registration("pulumi:pulumi:Stack", "p-s", "", "", stack),
        Registration("a:index:Outer", "outer", stack, "", outer),
        Registration("pulumi:providers:kubernetes", "k8s", outer, "", provider),
        Registration("a:index:Inner", "inner", outer, "", inner),
        Registration("gcp:x/y:Y", "leaf", inner, f"{provider}::k8s-id", leaf),
    ]
    assert engine_urns(registrations) == [
        f"{head}::a:index:Outer$a:index:Inner$gcp:x/y:Y::leaf"
        f"  provider={head}::a:index:Outer$pulumi:providers:kubernetes::k8s",
        f"{head}::a:index:Outer$a:index:Inner::inner",
        f"{head}::a:index:Outer$pulumi:providers:kubernetes::k8s",
        f"{head}::a:index:Outer::outer",
    ]
