"""A stack's state written before a module moved still loads its dynamic providers.

Why the old module paths stay: docs/architecture.md "Dynamic providers". The pickles in
tests/support/fixtures/providers/before_layout.json, taken from a v5e1 run before `components/`
was split into `vm/` and `gke/`, name `components.queued_resource`, `components.org_policy` and
`components.host_key`, and must keep resolving.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from components.vm.host_key import NodeHostKeyProvider
from components.vm.org_policy import OrgPolicyGateProvider
from components.vm.queued_resource import QueuedResourceProvider
from tests.support.provider_host import provider_blob, run_provider
from tests.support.pulumi_program import ROOT, ProgramRun, run_program

BEFORE = json.loads((ROOT / "tests/support/fixtures/providers/before_layout.json").read_text())
OLD_MODULES = {
    "tpu-qr": "components.queued_resource",
    "tpu-org-policy": "components.org_policy",
    "node-host-key": "components.host_key",
}
CURRENT = {
    "tpu-qr": QueuedResourceProvider,
    "tpu-org-policy": OrgPolicyGateProvider,
    "node-host-key": NodeHostKeyProvider,
}


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program("v5e1")


@pytest.mark.parametrize("name", sorted(OLD_MODULES))
def test_a_provider_pickled_before_the_layout_unpickles_to_todays_class(name: str) -> None:
    old = BEFORE["providers"][name]
    # The fixture is what it claims: a pickle by reference to the old module path.
    assert OLD_MODULES[name].encode() in base64.b64decode(old)
    done = run_provider(old, "cls = type(provider)\nprint(cls.__module__, cls.__qualname__)\n")
    assert done.returncode == 0, done.stderr
    cls = CURRENT[name]
    assert done.stdout.split() == [cls.__module__, cls.__qualname__]


@pytest.mark.parametrize("name", sorted(OLD_MODULES))
def test_the_new_module_path_alone_is_no_change(run: ProgramRun, name: str) -> None:
    """After the move the program sends a `__provider` naming the new path; the provider's
    diff against the state (old path) must find nothing to do, so no update and no
    replacement is planned."""
    new = provider_blob(run, name)
    [resource] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if r.name == name]
    news: dict[str, Any] = {**resource.inputs, "__provider": new}
    olds: dict[str, Any] = {**resource.inputs, "__provider": BEFORE["providers"][name]}
    if name == "tpu-qr":
        olds.update(zone=news["zones"][0], state="ACTIVE", termination_time=None)
    diff = CURRENT[name]().diff("id", olds, news)
    assert not diff.changes
    assert not diff.replaces
