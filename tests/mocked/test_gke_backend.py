"""The GKE backend under Pulumi mocks: every resource's key inputs, for the v6e4-gke stack file.

What a user would notice if it were wrong: TPU nodes that are not flex-start (billed until
deleted) or are not recycled ahead of their end, pods that ask for the wrong TPU count or land
nowhere (or on another stack's nodes), every replica drained at once, flags that differ from
the VM path, an address that changes, secrets in a manifest.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import yaml
from pulumi.runtime import mocks

from components import catalog
from components.config import ConfigError
from tests.support.gke_manifests import V5E1_ON_GKE
from tests.support.mock_outputs import (
    API_KEY_SENTINEL,
    CLUSTER_ENDPOINT,
    LB_ADDRESS,
    existing_cluster,
)
from tests.support.pulumi_program import (
    ROOT,
    InvokeFailure,
    ProgramRun,
    run_program,
    stack_file_config,
)

STACK = "v6e4-gke"
NS = "tpu-vllm-v6e4-gke"
GSA = "tpu-vllm-v6e4-gke@test-project.iam.gserviceaccount.com"
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SPC = "kubernetes:secrets-store.csi.x-k8s.io/v1:SecretProviderClass"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program(STACK)


def node_class(run: ProgramRun) -> dict[str, Any]:
    return dict(run.one(COMPUTE_CLASS).inputs)


def tpu_rule(run: ProgramRun) -> dict[str, Any]:
    [rule] = node_class(run)["spec"]["priorities"]
    return dict(rule)


def server_pod(run: ProgramRun) -> dict[str, Any]:
    return dict(run.one(DEPLOYMENT).inputs["spec"]["template"]["spec"])


def server_container(run: ProgramRun) -> dict[str, Any]:
    [container] = [c for c in server_pod(run)["containers"] if c["name"] == "vllm"]
    return dict(container)


def test_stack_file_serves_31b_on_two_v6e4_replicas(run: ProgramRun) -> None:
    assert run.outputs["replicas"] == 2
    assert run.outputs["chip"] == "v6e-4"
    assert run.outputs["model"] == "google/gemma-4-31B-it"
    assert run.outputs["zones"] == ["us-east5-a", "us-east5-b"]
    assert run.outputs["cluster"] == f"projects/test-project/locations/us-east5/clusters/{NS}"
    # Two whole v6e-4 slices at seed 003's $1.35 per chip-hour; 4 h bounds a run.
    assert run.outputs["hourly_cost_usd"] == pytest.approx(2 * 4 * 1.35)
    assert run.outputs["max_run_cost_usd"] == pytest.approx(2 * 4 * 1.35 * 4)


def test_endpoint_is_the_reserved_regional_address(run: ProgramRun) -> None:
    address = run.one("gcp:compute/address:Address").inputs
    assert address["region"] == "us-east5"
    assert address["addressType"] == "EXTERNAL"
    assert run.outputs["endpoint"] == f"http://{LB_ADDRESS}:8000"
    assert run.outputs["openai_base_url"] == f"http://{LB_ADDRESS}:8000/v1"
    assert run.outputs["external_ip"] == LB_ADDRESS
    service = run.one("kubernetes:core/v1:Service").inputs["spec"]
    assert service["type"] == "LoadBalancer"
    # The address by name (tests/mocked/test_gke_real_systems.py): GKE's own annotation, not the IP.
    annotations = run.one("kubernetes:core/v1:Service").inputs["metadata"]["annotations"]
    assert annotations["networking.gke.io/load-balancer-ip-addresses"] == address["name"]
    assert service["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert service["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["selector"] == run.one(DEPLOYMENT).inputs["spec"]["selector"]["matchLabels"]


def test_tpu_nodes_come_from_the_stacks_own_flex_start_compute_class(run: ProgramRun) -> None:
    """accelerated-platforms' v6e class (platforms/gke/base/core/custom_compute_class/templates/
    manifests/tpu/v6e/custom-compute-tpu-v6e-2x2.yaml), for this stack: flex-start with node
    recycling `renewal.lead` ahead, the run limit, auto-created pools, in `tpu.zones` only."""
    assert [p.name for p in run.of_type(NODE_POOL)] == ["gke-system-pool"]  # no TPU pool
    cls = node_class(run)
    assert cls["apiVersion"] == "cloud.google.com/v1"
    assert cls["metadata"]["name"] == NS
    assert "namespace" not in cls["metadata"]  # cluster-scoped
    assert cls["spec"]["nodePoolAutoCreation"] == {"enabled": True}
    assert cls["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert tpu_rule(run) == {
        "machineType": "ct6e-standard-4t",
        "tpu": {"type": "tpu-v6e-slice", "count": 4, "topology": "2x2"},
        "location": {"zones": ["us-east5-a", "us-east5-b"]},
        "flexStart": {"enabled": True, "nodeRecycling": {"leadTimeSeconds": 3600}},
        "maxRunDurationSeconds": 14400,  # tpu.maxRunDuration 4h
    }
    # The pods wait for the class (and go before it on destroy).
    assert COMPUTE_CLASS in {
        next(r.type for r in run.resources if r.name == d)
        for d in run.dependencies["vllm-deployment"]
    }


@pytest.mark.parametrize(
    ("changes", "lead"),
    [
        ({"tpu-vllm:renewal.lead": "45m"}, 45 * 60),
        ({"tpu-vllm:renewal.lead": "1h30m", "tpu-vllm:tpu.maxRunDuration": "2h"}, 90 * 60),
        # The default lead (1h) is at most half of a shorter run.
        ({"tpu-vllm:tpu.maxRunDuration": "90m"}, 45 * 60),
    ],
    ids=["lead", "lead-and-run", "default-on-a-short-run"],
)
def test_node_recycling_lead_is_renewal_lead(changes: dict[str, Any], lead: int) -> None:
    rule = tpu_rule(run_program(STACK, changes))
    assert rule["flexStart"]["nodeRecycling"] == {"leadTimeSeconds": lead}
    assert lead < rule["maxRunDurationSeconds"]


def test_created_cluster_has_no_default_pool_identity_and_secret_manager(run: ProgramRun) -> None:
    cluster = run.one(CLUSTER).inputs
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["initialNodeCount"] == 1
    assert cluster["location"] == "us-east5"  # two zones: regional
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "test-project.svc.id.goog"}
    assert cluster["secretManagerConfig"] == {"enabled": True}
    assert cluster["releaseChannel"]["channel"] in ("RAPID", "REGULAR", "STABLE")
    assert cluster["deletionProtection"] is False
    [system] = [p for p in run.of_type(NODE_POOL) if p.name == "gke-system-pool"]
    assert system.inputs["nodeCount"] == 1
    assert system.inputs["nodeLocations"] == ["us-east5-a"]
    assert not system.inputs["nodeConfig"]["machineType"].startswith("ct")  # a CPU machine


def test_one_zone_makes_a_zonal_cluster() -> None:
    run = run_program(STACK, {"tpu-vllm:tpu.zones": ["us-east5-b"]})
    assert run.one(CLUSTER).inputs["location"] == "us-east5-b"
    assert tpu_rule(run)["location"] == {"zones": ["us-east5-b"]}
    assert run.outputs["cluster"].endswith("/locations/us-east5-b/clusters/" + NS)


@pytest.mark.parametrize(
    ("provisioning", "spot"), [("spot", True), ("on-demand", None)], ids=["spot", "on-demand"]
)
def test_spot_and_on_demand_variants(provisioning: str, spot: bool | None) -> None:
    run = run_program(
        STACK,
        {"tpu-vllm:tpu.provisioning": provisioning, "tpu-vllm:tpu.maxRunDuration": None},
    )
    rule = tpu_rule(run)
    assert "flexStart" not in rule  # no run end: nothing to recycle
    assert "maxRunDurationSeconds" not in rule
    assert rule["spot"] is bool(spot)
    assert rule["tpu"] == {"type": "tpu-v6e-slice", "count": 4, "topology": "2x2"}


def test_deployment_rolls_one_replica_at_a_time_and_skips_the_all_replicas_await(
    run: ProgramRun,
) -> None:
    """A new template (an image upgrade) adds one pod on a spare node and
    removes an old one only once a new one is Ready (maxUnavailable 0), never all at once."""
    deployment = run.one(DEPLOYMENT).inputs
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert deployment["metadata"]["namespace"] == NS
    assert server_pod(run)["serviceAccountName"] == "vllm"


def test_pods_ask_for_the_whole_slice_on_a_matching_tpu_node(run: ProgramRun) -> None:
    container = server_container(run)
    tp = dict(itertools.pairwise(run.outputs["vllm_args"]))["--tensor-parallel-size"]
    assert container["resources"]["limits"]["google.com/tpu"] == tp
    assert container["resources"]["requests"]["google.com/tpu"] == tp
    assert tp == "4"
    pod = server_pod(run)
    # The class alone: the class's rule names the slice.
    assert pod["nodeSelector"] == {"cloud.google.com/compute-class": NS}
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_pods_select_the_stacks_own_compute_class_and_tolerate_its_taint(run: ProgramRun) -> None:
    """GKE docs "About custom ComputeClasses": a pod requests a class with the node selector
    `cloud.google.com/compute-class: NAME`; the class's nodes carry the taint
    `cloud.google.com/compute-class=NAME:NoSchedule`. The class is this stack's, not a shared
    one: another stack in the same cluster gets its own (pods land on their own
    stack's TPU nodes)."""
    pod = server_pod(run)
    name = node_class(run)["metadata"]["name"]
    assert pod["nodeSelector"]["cloud.google.com/compute-class"] == name
    assert {
        "key": "cloud.google.com/compute-class",
        "operator": "Equal",
        "value": name,
        "effect": "NoSchedule",
    } in pod["tolerations"]
    # The class's TPU rule names the slice, and the pod's request takes all of it.
    rule = tpu_rule(run)
    assert rule["tpu"] == {"type": "tpu-v6e-slice", "count": 4, "topology": "2x2"}
    count = int(rule["tpu"]["count"])  # numbers cross the engine as floats
    assert server_container(run)["resources"]["limits"]["google.com/tpu"] == str(count)


# --- never every replica at once ----------------------------------------------------------


def test_a_disruption_budget_keeps_one_replica_serving_while_nodes_drain(run: ProgramRun) -> None:
    """policy/v1: drains (GKE's node consolidation and migration, a recycled node) evict through
    the eviction API, which refuses an eviction that would leave no Ready replica."""
    budget = run.one(PDB).inputs
    assert budget["metadata"]["namespace"] == NS
    spec = budget["spec"]
    assert spec["minAvailable"] == 1
    assert "maxUnavailable" not in spec
    # It covers exactly the server pods: the Deployment's pod labels, the Service's selector.
    deployment = run.one(DEPLOYMENT).inputs["spec"]
    assert spec["selector"] == {"matchLabels": deployment["selector"]["matchLabels"]}
    assert deployment["template"]["metadata"]["labels"] == deployment["selector"]["matchLabels"]
    service = run.one("kubernetes:core/v1:Service").inputs["spec"]
    assert service["selector"] == spec["selector"]["matchLabels"]
    # A replica that is not Ready serves nobody: it may always be moved.
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # Fewer Ready replicas than the budget asks for would block every drain.
    assert deployment["replicas"] > spec["minAvailable"]


def test_the_gke_stack_and_the_gke_default_run_two_replicas() -> None:
    """One replica cannot move to a recycled node without a gap: the default is two, and so is
    the stack file's."""
    assert stack_file_config(STACK)["tpu-vllm:gke"]["replicas"] >= 2
    run = run_program(STACK, {"tpu-vllm:gke.replicas": None})
    assert run.outputs["replicas"] == 2
    assert run.one(DEPLOYMENT).inputs["spec"]["replicas"] == 2
    assert run.one(PDB).inputs["spec"]["minAvailable"] == 1


def test_a_starting_replica_stays_out_of_the_load_balancer_until_it_serves(
    run: ProgramRun,
) -> None:
    """The Service sends traffic only to Ready pods (no `publishNotReadyAddresses`), a pod is
    Ready only once every container is, and the server's readiness probe passes only when
    vLLM's HTTP server answers /health, which it starts after the engine is up (DESIGN.md);
    the startup probe, which asks the model, holds readiness back for the whole start."""
    service = run.one("kubernetes:core/v1:Service").inputs["spec"]
    assert not service.get("publishNotReadyAddresses")
    container = server_container(run)
    probe = container["readinessProbe"]
    assert probe["httpGet"]["path"] == "/health"
    assert probe["httpGet"]["port"] == container["ports"][0]["containerPort"]
    assert service["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert "initialDelaySeconds" not in probe  # the startup probe gates it instead
    assert "--port" in container["startupProbe"]["exec"]["command"]


def test_v5e1_on_gke_uses_the_v5e_machine_type_and_labels() -> None:
    run = run_program(STACK, V5E1_ON_GKE)
    rule = tpu_rule(run)
    assert rule["machineType"] == "ct5lp-hightpu-1t"
    assert rule["tpu"] == {"type": "tpu-v5-lite-podslice", "count": 1, "topology": "1x1"}
    assert rule["location"] == {"zones": ["us-west4-a"]}
    assert server_pod(run)["nodeSelector"] == {"cloud.google.com/compute-class": NS}
    assert server_container(run)["resources"]["limits"]["google.com/tpu"] == "1"


def test_vllm_flags_and_entrypoint_are_the_vm_paths(run: ProgramRun) -> None:
    """Rendered by the same code: the GKE args equal the VM stack's `docker run` flags."""
    vm = run_program("v6e4")
    container = server_container(run)
    assert container["image"] == run.outputs["image"]  # the pinned NAME@sha256
    assert container["command"] == ["/tpu-vllm/entrypoint.sh"]
    assert container["args"] == ["vllm", "serve", "google/gemma-4-31B-it", *vm.outputs["vllm_args"]]
    assert run.outputs["vllm_args"] == vm.outputs["vllm_args"]
    start = next(c for c in vm.of_type("command:remote:Command") if c.name == "vllm-start")
    for flag, value in itertools.pairwise(container["args"][3:]):
        if flag.startswith("--") and not value.startswith("--"):
            assert f"{flag} {value}" in start.inputs["create"].replace("'", "")
    scripts = run.named("vllm-scripts").inputs["data"]
    assert scripts["entrypoint.sh"] == (ROOT / "scripts/remote/vllm_entrypoint.sh").read_text()
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["HF_HOME"] == "/dev/shm"  # the VM path's HF cache in memory
    # Not the VM path's /run/secrets: above the service-account token
    # (components/gke/k8s_manifests.py).
    assert env["HF_TOKEN_PATH"] == "/etc/tpu-vllm/secrets/hf_token"
    volumes = {v["name"]: v for v in server_pod(run)["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm"
    assert mounts["vllm-cache"] == "/root/.cache/vllm"  # the VM's ~/.cache/vllm mount


def test_probes_allow_the_readiness_timeout_then_watch_health(run: ProgramRun) -> None:
    container = server_container(run)
    startup = container["startupProbe"]
    command = startup["exec"]["command"]
    # The VM's checks, from the scripts ConfigMap the container mounts at /tpu-vllm.
    assert command[:3] == ["python3", "/tpu-vllm/wait_ready.py", "probe"]
    scripts = run.named("vllm-scripts").inputs["data"]
    assert scripts["wait_ready.py"] == (ROOT / "scripts/remote/wait_ready.py").read_text()
    flags = dict(itertools.pairwise(command[3:]))
    assert flags["--port"] == "8000" and flags["--model"] == "google/gemma-4-31B-it"
    assert flags["--api-key-file"] == "/etc/tpu-vllm/secrets/vllm_api_key"  # a path, no key
    assert command[-1] == "--tool-call"  # the stack's gemma4 tool-call parser
    # /health and /v1/models (10 s each), two answers of 120 s, and Python's start.
    assert startup["timeoutSeconds"] == 2 * 10 + 2 * 120 + 10
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60 * 60  # readinessTimeout
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
        assert container[probe]["periodSeconds"] * container[probe]["failureThreshold"] < 600


def test_up_waits_for_one_replica_to_answer_v1_models(run: ProgramRun) -> None:
    job = run.one("kubernetes:batch/v1:Job").inputs
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TARGET_HOST"] == f"vllm.{NS}.svc"
    assert env["MODEL"] == "google/gemma-4-31B-it"
    # capacityWait 30m (default), then each of the 2 replicas' turns (a rolling update replaces
    # them one at a time): the old pod's 40 s grace, a 10 min image pull, the 5 min cache
    # restore, readinessTimeout 60m.
    assert int(env["DEADLINE_SECONDS"]) == 30 * 60 + 2 * (40 + 600 + 300 + 60 * 60)
    # Then the two answers (120 s each), within the Job's own deadline.
    assert job["spec"]["activeDeadlineSeconds"] >= int(env["DEADLINE_SECONDS"]) + 2 * 120
    script = run.named("vllm-scripts").inputs["data"]["wait_ready.sh"]
    assert script.startswith("set -euo pipefail\n")
    assert "/v1/models" in script and "--header @-" in script
    assert job["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"


def test_a_new_pod_template_reruns_the_readiness_job() -> None:
    def revision(run: ProgramRun) -> str:
        job = run.one("kubernetes:batch/v1:Job").inputs
        return str(job["spec"]["template"]["metadata"]["annotations"]["tpu-vllm/server-revision"])

    base = revision(run_program(STACK))
    assert revision(run_program(STACK)) == base
    assert revision(run_program(STACK, {"tpu-vllm:vllm.maxModelLen": 16384})) != base


def test_identity_ksa_bound_to_the_gsa_which_alone_reads_the_secrets(run: ProgramRun) -> None:
    binding = run.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert binding["role"] == "roles/iam.workloadIdentityUser"
    assert binding["member"] == f"serviceAccount:test-project.svc.id.goog[{NS}/vllm]"
    ksa = run.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert ksa["name"] == "vllm"
    assert ksa["namespace"] == NS
    assert ksa["annotations"] == {"iam.gke.io/gcp-service-account": GSA}
    grants = run.of_type("gcp:secretmanager/secretIamMember:SecretIamMember")
    assert {g.inputs["secretId"] for g in grants} == {"hf-token", f"{NS}-api-key"}
    for grant in grants:
        assert grant.inputs["role"] == "roles/secretmanager.secretAccessor"
        assert grant.inputs["member"] == f"serviceAccount:{GSA}"


def test_secrets_are_mounted_by_the_secret_manager_add_on(run: ProgramRun) -> None:
    classes = {c.inputs["metadata"]["name"]: c.inputs for c in run.of_type(SPC)}
    assert set(classes) == {"vllm-secrets", "vllm-api-key"}
    for spc in classes.values():
        assert spc["apiVersion"] == "secrets-store.csi.x-k8s.io/v1"
        assert spc["spec"]["provider"] == "gke"
    entries = yaml.safe_load(classes["vllm-secrets"]["spec"]["parameters"]["secrets"])
    assert entries == [
        {
            "resourceName": "projects/test-project/secrets/hf-token/versions/latest",
            "path": "hf_token",
        },
        {
            "resourceName": f"projects/test-project/secrets/{NS}-api-key/versions/1",
            "path": "vllm_api_key",
        },
    ]
    probe = yaml.safe_load(classes["vllm-api-key"]["spec"]["parameters"]["secrets"])
    assert [e["path"] for e in probe] == ["vllm_api_key"]  # the Job sees the API key only
    volumes = {v["name"]: v for v in server_pod(run)["volumes"]}
    assert volumes["secrets"]["csi"] == {
        "driver": "secrets-store-gke.csi.k8s.io",
        "readOnly": True,
        "volumeAttributes": {"secretProviderClass": "vllm-secrets"},
    }
    annotations = run.one(DEPLOYMENT).inputs["spec"]["template"]["metadata"]["annotations"]
    assert annotations["tpu-vllm/api-key-version"] == "1"  # a rotated key rolls the pods


def test_no_secret_in_any_manifest_input_or_plain_output(run: ProgramRun) -> None:
    assert run.of_type("kubernetes:core/v1:Secret") == []
    for resource in run.resources:
        if resource.type == "gcp:secretmanager/secretVersion:SecretVersion":
            continue  # the one place the key goes, as a Pulumi secret (test_secrets_program)
        assert API_KEY_SENTINEL not in json.dumps(resource.inputs, default=str), resource.name
    for name, value in run.outputs.items():
        if name not in run.secret_outputs:
            assert API_KEY_SENTINEL not in json.dumps(value, default=str), name
    assert "api_key" in run.secret_outputs
    assert "ssh_private_key" in run.secret_outputs


SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # how the SDK wraps a secret value on the wire


def test_api_key_reaches_state_only_as_a_pulumi_secret_and_the_hf_token_never(
    run: ProgramRun,
) -> None:
    """The VM path's sentinel checks (tests/mocked/test_secrets_program.py), on this backend: the
    one input holding the key is secret-wrapped, and the HF token is looked up, never read."""
    [version] = run.of_type("gcp:secretmanager/secretVersion:SecretVersion")
    data = version.inputs["secretData"]
    assert SECRET_SIG in data.values() and data["value"] == API_KEY_SENTINEL
    assert "api_key" in run.secret_outputs
    tokens = [token for token, _ in run.calls]
    assert "gcp:secretmanager/getSecret:getSecret" in tokens
    assert not any("getSecretVersion" in token for token in tokens)  # would read the token


def test_missing_hf_token_secret_fails_before_any_gke_resource() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:secretmanager/getSecret:getSecret":
            raise InvokeFailure("googleapi: Error 404: Secret [hf-token] not found")
        return dict(args.args)

    result = run_program(STACK, call=call, expect_error=True)
    message = str(result.error)
    assert "tpu-vllm:access.hfTokenSecret" in message
    assert f"python -m scripts.save_hf_token --stack {STACK}" in message
    assert result.resources == []


def test_kubernetes_provider_uses_the_cluster_and_the_gcloud_auth_plugin(run: ProgramRun) -> None:
    [provider] = run.of_type("pulumi:providers:kubernetes")
    config = yaml.safe_load(provider.inputs["kubeconfig"])
    assert config["clusters"][0]["cluster"]["server"] == f"https://{CLUSTER_ENDPOINT}"
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    for resource in run.resources:
        if resource.type.startswith("kubernetes:"):
            assert resource.provider.endswith("::vllm-k8s::vllm-k8s-id"), resource.name


def test_outputs_that_name_one_vm_are_empty_not_none(run: ProgramRun) -> None:
    for name in ("zone", "queued_resource", "node", "ssh_command", "ssh_host_key", "expires_at"):
        assert run.outputs[name] == "", name
    assert run.outputs["ssh_private_key"] == ""
    assert all(value is not None for value in run.outputs.values())


def test_vm_stacks_report_one_replica_and_no_cluster() -> None:
    run = run_program("v5e1")
    assert run.outputs["replicas"] == 1
    assert run.outputs["cluster"] == ""
    assert not any(r.type.startswith(("kubernetes:", "gcp:container")) for r in run.resources)


# --- an existing cluster ------------------------------------------------------------------


def test_existing_cluster_gets_no_node_pool_only_the_stacks_compute_class() -> None:
    """The class creates the TPU pools in whatever cluster it is applied to."""
    run = run_program(STACK, {"tpu-vllm:gke.cluster": "shared"}, call=existing_cluster())
    assert run.of_type(CLUSTER) == []
    assert run.of_type(NODE_POOL) == []
    assert node_class(run)["metadata"]["name"] == NS
    assert run.outputs["cluster"] == "projects/test-project/locations/us-east5/clusters/shared"
    [provider] = run.of_type("pulumi:providers:kubernetes")
    assert "https://192.0.2.55" in provider.inputs["kubeconfig"]
    lookups = [a for t, a in run.calls if t == "gcp:container/getCluster:getCluster"]
    assert lookups == [{"name": "shared", "location": "us-east5", "project": "test-project"}]


def test_existing_cluster_by_path_in_another_project() -> None:
    path = "projects/platform-prj/locations/us-east5/clusters/tpus"
    run = run_program(STACK, {"tpu-vllm:gke.cluster": path}, call=existing_cluster())
    assert tpu_rule(run)["location"] == {"zones": ["us-east5-a", "us-east5-b"]}
    assert run.outputs["cluster"] == path
    binding = run.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert binding["member"] == f"serviceAccount:platform-prj.svc.id.goog[{NS}/vllm]"


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"masterVersion": "1.32.4-gke.1106000"}, catalog.GKE_MIN_FLEX_START_VERSION),
        ({"masterVersion": "1.33.0-gke.1700000"}, catalog.GKE_MIN_FLEX_START_VERSION),
        # Flex-start TPUs, but a class creates pools only with node auto-provisioning, off here.
        (
            {"masterVersion": "1.33.2-gke.1240000", "clusterAutoscalings": [{"enabled": False}]},
            "--enable-autoprovisioning",
        ),
        ({"workloadIdentityConfigs": []}, "Workload Identity"),
        ({"secretManagerConfigs": [{"enabled": False, "rotationConfigs": []}]}, "Secret Manager"),
    ],
    ids=[
        "old-minor",
        "old-patch",
        "class-without-auto-provisioning",
        "no-workload-identity",
        "no-secret-manager",
    ],
)
def test_unfit_existing_cluster_is_refused_before_any_resource(
    fields: dict[str, Any], text: str
) -> None:
    changes = {"tpu-vllm:gke.cluster": "shared"}
    run = run_program(STACK, changes, call=existing_cluster(**fields), expect_error=True)
    assert isinstance(run.error, ConfigError), run.error
    assert "tpu-vllm:gke.cluster" in str(run.error)
    assert text in str(run.error)
    assert run.resources == []


def test_existing_cluster_before_class_auto_creation_needs_auto_provisioning() -> None:
    """GKE docs "About custom ComputeClasses": before 1.33.3-gke.1136000 a class creates node
    pools only if cluster-level node auto-provisioning is on; from it, without."""
    changes = {"tpu-vllm:gke.cluster": "shared"}
    older = {"masterVersion": "1.33.2-gke.1240000"}
    run = run_program(
        STACK, changes, call=existing_cluster(**older, clusterAutoscalings=[{"enabled": True}])
    )
    assert node_class(run)["spec"]["nodePoolAutoCreation"] == {"enabled": True}
    error = run_program(
        STACK,
        changes,
        call=existing_cluster(**older, clusterAutoscalings=[{"enabled": False}]),
        expect_error=True,
    ).error
    assert isinstance(error, ConfigError)
    assert "1.33.2-gke.1240000" in str(error)
    assert catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION in str(error)
    floor = {"masterVersion": catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION}
    run_program(STACK, changes, call=existing_cluster(**floor, clusterAutoscalings=[]))


def test_missing_existing_cluster_is_a_clear_error() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:container/getCluster:getCluster":
            raise InvokeFailure("googleapi: Error 404: Not found: clusters/nope")
        return dict(args.args)

    run = run_program(STACK, {"tpu-vllm:gke.cluster": "nope"}, call=call, expect_error=True)
    assert "tpu-vllm:gke.cluster = 'nope'" in str(run.error)
    assert "projects/test-project/locations/us-east5/clusters/nope" in str(run.error)
    assert run.resources == []


ENGINE_VERSIONS = "gcp:container/getEngineVersions:getEngineVersions"


def channel_default(version: str) -> Any:
    """A `getEngineVersions` answer whose REGULAR channel defaults to `version`."""

    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == ENGINE_VERSIONS:
            return {**args.args, "releaseChannelDefaultVersion": {"REGULAR": version}}
        return dict(args.args)

    return call


@pytest.mark.parametrize(
    "version", ["1.33.0-gke.1700000", "1.33.2-gke.1240000"], ids=["before-flex", "before-class"]
)
def test_created_cluster_version_is_checked_against_the_floor(version: str) -> None:
    """GKE flex-start TPUs need 1.33.0-gke.1712000, and a ComputeClass creates its pools
    without node auto-provisioning from 1.33.3-gke.1136000: the cluster the stack would create
    takes its channel's default, which is read (at preview too) before anything is created."""
    fit = run_program(STACK, call=channel_default("1.34.1-gke.1829001"))
    lookups = [a for t, a in fit.calls if t == ENGINE_VERSIONS]
    assert lookups == [{"location": "us-east5", "project": "test-project"}]
    assert len(fit.of_type(CLUSTER)) == 1
    old = run_program(STACK, call=channel_default(version), expect_error=True)
    assert isinstance(old.error, ConfigError), old.error
    assert "tpu-vllm:gke.cluster" in str(old.error)
    assert version in str(old.error)
    assert catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION in str(old.error)
    assert old.resources == []


def test_unreadable_gke_versions_stop_before_any_resource() -> None:
    def call(args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == ENGINE_VERSIONS:
            raise InvokeFailure("googleapi: Error 403: Kubernetes Engine API has not been used")
        return dict(args.args)

    run = run_program(STACK, call=call, expect_error=True)
    assert "container.googleapis.com" in str(run.error)
    assert "us-east5" in str(run.error)
    assert run.resources == []


# --- the compile cache ----------------------------------------------------------------------


def test_pods_restore_and_save_the_vm_paths_compile_cache(run: ProgramRun) -> None:
    """Same tool, same key: the prefix is `compile_cache`, whose KEY equals the VM stack's."""
    prefix = run.outputs["compile_cache"]
    vm_prefix = run_program("v6e4").outputs["compile_cache"]
    assert prefix.rsplit("/", 2)[-2] == vm_prefix.rsplit("/", 2)[-2]  # the same key
    pod = server_pod(run)
    [restore] = pod["initContainers"]
    assert restore["name"] == "xla-cache-restore"
    assert restore["image"] == run.outputs["image"]  # already on the node: no extra pull
    env = {e["name"]: e.get("value") for e in restore["env"]}
    assert env["CACHE_PREFIX"] == prefix
    assert env["CACHE_DIR"] == "/root/.cache/vllm/xla_cache"
    [save] = [c for c in pod["containers"] if c["name"] == "xla-cache-save"]
    assert {e["name"]: e.get("value") for e in save["env"]}["CACHE_PREFIX"] == prefix
    for container in (restore, save, server_container(run)):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["vllm-cache"] == "/root/.cache/vllm"  # one emptyDir, shared
    scripts = run.named("vllm-scripts").inputs["data"]
    assert scripts["xla_cache.py"] == (ROOT / "scripts/remote/xla_cache.py").read_text()
    assert scripts["cache_restore.sh"].startswith("set -euo pipefail\n")
    writer = run.one("gcp:storage/bucketIAMMember:BucketIAMMember").inputs
    assert writer["member"] == f"serviceAccount:{GSA}"
    # The generation is the pinned image's: no pod reads its own status, no Role for it.
    assert {e["name"]: e.get("value") for e in restore["env"]}["SERVER_IMAGE"] == restore["image"]
    assert [r for r in run.resources if "pod-reader" in r.name] == []
    assert run.outputs["cache_restored"]["restored"] is False


def test_cache_off_means_no_cache_containers() -> None:
    run = run_program(STACK, {"tpu-vllm:cache.enabled": False})
    assert "initContainers" not in server_pod(run)
    assert [c["name"] for c in server_pod(run)["containers"]] == ["vllm"]
    assert run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember") == []
    assert run.outputs["compile_cache"] == ""


def test_a_stopping_replica_keeps_answering_while_the_service_drops_it(run: ProgramRun) -> None:
    """vLLM stops its HTTP server at once on SIGTERM (vllm `entrypoints/launcher.py`), while the
    endpoint controller and kube-proxy are still removing the pod: a preStop sleep holds the
    SIGTERM back, and the grace leaves vLLM its shutdown after it."""
    container = server_container(run)
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
    assert server_pod(run)["terminationGracePeriodSeconds"] == 10 + 30


def test_each_pod_template_mounts_the_scripts_it_was_made_with(run: ProgramRun) -> None:
    """The kubelet refreshes a mounted ConfigMap in place: an edited one would hand the old
    replicas, serving during a rolling update, the new scripts. So the ConfigMap is named after
    its content, and the server pods and the readiness Job mount that name."""
    scripts = run.named("vllm-scripts").inputs
    name = scripts["metadata"]["name"]
    assert name.startswith("tpu-vllm-scripts-")
    volumes = {v["name"]: v for v in server_pod(run)["volumes"]}
    assert volumes["scripts"]["configMap"]["name"] == name
    job = run.one("kubernetes:batch/v1:Job").inputs["spec"]["template"]["spec"]
    assert {v["name"]: v for v in job["volumes"]}["scripts"]["configMap"]["name"] == name
    # Other scripts (no compile cache: its tool is not mounted), another name.
    other = run_program(STACK, {"tpu-vllm:cache.enabled": False})
    assert other.named("vllm-scripts").inputs["metadata"]["name"] != name
