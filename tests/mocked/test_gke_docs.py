"""What the GKE pages and messages tell a user, against the sources they rest on.

- The APIs to enable: the pods' KSA names the stack's service account
  (`iam.gke.io/gcp-service-account`), and with that annotation the Secret Manager provider trades
  the pod's identity-binding token for the account's token with `IAMClient.GenerateAccessToken`,
  an `iamcredentials.googleapis.com` call (GoogleCloudPlatform/secrets-store-csi-driver-provider-gcp
  `auth/auth.go`, `Token`; GKE's add-on, `provider: gke`, is Google's build of it). Without the
  API the mount fails and no pod starts.
- The TPU nodes are the ComputeClass's (components/gke/compute_class.py): no message, docstring
  or page may still speak of a TPU node pool the stack makes.
- Flex-start obtains a request's nodes as one unit: "The cluster autoscaler accepts your request
  and calculates the number of required nodes, treating them as a single unit", then provisions
  them when they are available (GKE "About flex-start", how the provisioning mode works).
"""

from __future__ import annotations

import re

from components.gke import backend, k8s_manifests
from tests.support.docs import read_doc, section
from tests.support.pulumi_program import refused, run_program

STACK = "v6e4-gke"


def enabled_apis(text: str) -> set[str]:
    """The services every `gcloud services enable ...` command on a page turns on."""
    found: set[str] = set()
    for match in re.finditer(r"gcloud services enable ([a-z0-9. ]+)", text):
        found.update(w for w in match.group(1).split() if w.endswith(".googleapis.com"))
    return found


def test_the_apis_to_enable_include_iamcredentials_because_the_pods_impersonate() -> None:
    run = run_program(STACK)
    ksa = run.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert ksa["annotations"]["iam.gke.io/gcp-service-account"]  # so GenerateAccessToken runs
    prerequisites = section(read_doc("gke"), "Prerequisites")
    apis = enabled_apis(prerequisites)
    assert "iamcredentials.googleapis.com" in apis
    assert {"container.googleapis.com", "secretmanager.googleapis.com"} <= apis
    assert "GenerateAccessToken" in prerequisites and "auth/auth.go" in prerequisites


def test_config_errors_speak_of_the_compute_class_not_a_node_pool() -> None:
    replicas = str(refused(STACK, {"tpu-vllm:gke.replicas": 0}, "tpu-vllm:gke.replicas", ["0"]))
    cluster = str(
        refused(
            STACK,
            {"tpu-vllm:gke.cluster": "projects/p-1234/locations/asia-northeast1/clusters/c"},
            "tpu-vllm:gke.cluster",
            ["asia-northeast1"],
        )
    )
    for message in (replicas, cluster):
        assert "node pool" not in message
        assert "ComputeClass" in message


def test_no_page_or_docstring_describes_a_tpu_node_pool_the_stack_makes() -> None:
    assert "node pool's name" not in (k8s_manifests.__doc__ or "")
    assert "no TPU node pool" in (backend.__doc__ or "")
    testing = read_doc("testing")
    assert "the stack's node pool" not in testing
    assert "gke-nodepool" not in testing  # the pods are pinned by the class, not a pool label


def test_the_gke_page_says_flex_start_obtains_the_nodes_as_one_unit() -> None:
    recycling = section(read_doc("gke"), "Node recycling: the gap a client sees")
    text = " ".join(recycling.split())
    assert "obtains a request's nodes as one unit" in text
    assert 'GKE "About flex-start"' in text
    assert "wait for capacity for all of them" in text
    assert "`gke.replicas: 1`" in text
