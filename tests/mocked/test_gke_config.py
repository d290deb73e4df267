"""Config of the GKE backend: bad inputs are refused before any resource exists."""

from __future__ import annotations

import re
from typing import Any

import pytest

from components.config import ConfigError
from tests.support.pulumi_program import refused, run_program

# (case id, stack, changes, key the error must name, texts it must contain)
BAD_INPUTS: list[tuple[str, str, dict[str, Any], str, list[str]]] = [
    (
        "zone without GKE flex-start v6e",
        "v6e4-gke",
        {"tpu-vllm:tpu.zones": ["us-east5-a", "us-east5-c"]},
        "tpu-vllm:tpu.zones",
        ["us-east5-c", "asia-northeast1-b, us-east5-a, us-east5-b"],
    ),
    (
        "zone offered by the TPU API but not by GKE flex-start",
        "v6e4-gke",
        {"tpu-vllm:tpu.zones": ["southamerica-west1-a"]},
        "tpu-vllm:tpu.zones",
        ["southamerica-west1-a", "backend vm"],
    ),
    (
        "v5e outside us-west4-a",
        "v6e4-gke",
        {
            "tpu-vllm:tpu.chip": "v5e-4",
            "tpu-vllm:tpu.zones": ["us-east5-a"],
            "tpu-vllm:model.id": "google/gemma-4-E2B-it",
        },
        "tpu-vllm:tpu.zones",
        ["flex-start v5e", "us-west4-a"],
    ),
    (
        "zones in two regions",
        "v6e4-gke",
        {"tpu-vllm:tpu.zones": ["us-east5-a", "asia-northeast1-b"]},
        "tpu-vllm:tpu.zones",
        ["one region", "asia-northeast1, us-east5"],
    ),
    ("zero replicas", "v6e4-gke", {"tpu-vllm:gke.replicas": 0}, "tpu-vllm:gke.replicas", ["0"]),
    ("negative replicas", "v6e4-gke", {"tpu-vllm:gke.replicas": -2}, "tpu-vllm:gke.replicas", []),
    (
        "replicas not a number",
        "v6e4-gke",
        {"tpu-vllm:gke.replicas": "two"},
        "tpu-vllm:gke.replicas",
        ["'two'"],
    ),
    (
        "multi-host chip",
        "v6e4-gke",
        {"tpu-vllm:tpu.chip": "v6e-16"},
        "tpu-vllm:tpu.chip",
        ["multi-host", "16 chips", "single-host"],
    ),
    (
        "multi-host chip in gcloud spelling",
        "v6e4-gke",
        {"tpu-vllm:tpu.chip": "v5litepod-32"},
        "tpu-vllm:tpu.chip",
        ["multi-host", "32 chips"],
    ),
    (
        "unknown backend",
        "v6e4-gke",
        {"tpu-vllm:backend": "kubernetes"},
        "tpu-vllm:backend",
        ["'kubernetes'", "did you mean `gke`", "vm | gke"],
    ),
    (
        "misspelt backend",
        "v5e1",
        {"tpu-vllm:backend": "gek"},
        "tpu-vllm:backend",
        ["did you mean `gke`"],
    ),
    (
        "unknown gke key",
        "v6e4-gke",
        {"tpu-vllm:gke.replica": 3},
        "tpu-vllm:gke.replica",
        ["did you mean `replicas`"],
    ),
    (
        "malformed cluster",
        "v6e4-gke",
        {"tpu-vllm:gke.cluster": "My_Cluster"},
        "tpu-vllm:gke.cluster",
        ["'My_Cluster'"],
    ),
    (
        "recycling lead as long as the run",
        "v6e4-gke",
        {"tpu-vllm:renewal.lead": "4h"},
        "tpu-vllm:renewal.lead = '4h'",
        ["not shorter than tpu-vllm:tpu.maxRunDuration (4 h)", "Fix:"],
    ),
    (
        "recycling lead longer than the run",
        "v6e4-gke",
        {"tpu-vllm:renewal.lead": "3h", "tpu-vllm:tpu.maxRunDuration": "2h"},
        "tpu-vllm:renewal.lead = '3h'",
        ["not shorter than tpu-vllm:tpu.maxRunDuration (2 h)"],
    ),
    (
        "recycling lead that is not a duration",
        "v6e4-gke",
        {"tpu-vllm:renewal.lead": "soon"},
        "tpu-vllm:renewal.lead = 'soon'",
        ["not a duration"],
    ),
    (
        "zero recycling lead",
        "v6e4-gke",
        {"tpu-vllm:renewal.lead": "0m"},
        "tpu-vllm:renewal.lead = '0m'",
        ["not a duration"],
    ),
    (
        "unknown renewal key",
        "v6e4-gke",
        {"tpu-vllm:renewal.leadTime": "1h"},
        "tpu-vllm:renewal.leadTime",
        ["did you mean `lead`"],
    ),
    (
        "cluster in another region than the zones",
        "v6e4-gke",
        {"tpu-vllm:gke.cluster": "projects/p-1234/locations/asia-northeast1/clusters/c"},
        "tpu-vllm:gke.cluster",
        ["asia-northeast1", "us-east5-a"],
    ),
]


@pytest.mark.parametrize(
    ("stack", "changes", "key", "texts"),
    [pytest.param(s, c, k, t, id=i) for i, s, c, k, t in BAD_INPUTS],
)
def test_bad_gke_input_is_rejected_before_any_resource(
    stack: str, changes: dict[str, Any], key: str, texts: list[str]
) -> None:
    message = str(refused(stack, changes, key, texts))
    assert "Fix" in message or "did you mean" in message
    assert "None" not in message


def test_backend_defaults_to_vm_and_accepts_either_case() -> None:
    assert run_program("v5e1").outputs["cluster"] == ""
    run = run_program("v5e1", {"tpu-vllm:backend": "GKE", "tpu-vllm:tpu.zones": ["us-west4-a"]})
    assert run.outputs["cluster"].endswith("/locations/us-west4-a/clusters/tpu-vllm-v5e1")


def test_gke_keys_on_a_vm_stack_warn_that_they_are_ignored() -> None:
    run = run_program("v5e1", {"tpu-vllm:gke.replicas": 3})
    assert run.outputs["replicas"] == 1
    assert any("tpu-vllm:gke is set" in w for w in run.warnings)


def test_the_tpu_api_zone_rule_does_not_apply_to_gke() -> None:
    """europe-west4 is refused on the VM path by a measured TPU API answer; on GKE the rule is
    GKE's own zone list, and its message names GKE, not the TPU API."""
    run = run_program(
        "v6e4-gke",
        {
            "tpu-vllm:tpu.chip": "v5e-1",
            "tpu-vllm:tpu.zones": ["europe-west4-a"],
            "tpu-vllm:model.id": "google/gemma-4-E2B-it",
        },
        expect_error=True,
    )
    assert "GKE offers flex-start v5e TPUs only in us-west4-a" in str(run.error)
    assert "TPU API rejects" not in str(run.error)


@pytest.mark.parametrize(
    ("stack", "changes"), [pytest.param(s, c, id=i) for i, s, c, _, _ in BAD_INPUTS]
)
def test_gke_problems_follow_the_message_convention(stack: str, changes: dict[str, Any]) -> None:
    """components/messages.py: `KEY = VALUE: what is wrong. Fix: ...`, one sentence-ended line."""
    run = run_program(stack, changes, expect_error=True)
    assert isinstance(run.error, ConfigError), run.error
    for problem in run.error.problems:
        assert re.match(r"^(tpu-vllm|gcp):[\w.]+ (= |is not set)", problem), problem
        assert " Fix: " in problem, problem
        assert problem.endswith((".", "?")), problem
        assert "\n" not in problem


def test_ssh_keys_on_a_gke_stack_warn_that_they_are_ignored() -> None:
    run = run_program("v6e4-gke", {"tpu-vllm:access.sshCidrs": ["10.0.0.0/8"]})
    assert any("access.sshCidrs is set, but backend gke has no SSH" in w for w in run.warnings)
    # The VM path's "SSH admits only allowedCidrs" warning would be wrong here.
    assert not any("SSH admits only" in w for w in run_program("v6e4-gke").warnings)


def test_a_recycling_lead_without_a_run_end_is_ignored_with_a_warning() -> None:
    changes = {
        "tpu-vllm:tpu.provisioning": "spot",
        "tpu-vllm:tpu.maxRunDuration": None,
        "tpu-vllm:renewal.lead": "30m",
    }
    run = run_program("v6e4-gke", changes)
    assert any("tpu-vllm:renewal.lead is set" in w and "'spot'" in w for w in run.warnings)
    assert not any("renewal.lead" in w for w in run_program("v6e4-gke").warnings)
