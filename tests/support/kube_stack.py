"""The GKE stack (`v6e4-gke`) through the real Pulumi CLI against the Kubernetes layer's control
plane: the `kube` engine tests (tests/engine/test_kube_engine_gke.py).

What runs for real: everything tests/support/engine_stack.py runs for real (the CLI, the language
host, the program, the dynamic providers, the file backend, `save_hf_token.py`), plus
pulumi-kubernetes' own provider (built by scripts/kube/build.sh) against kube-apiserver,
the controller manager, the scheduler and kwok's GKE-shaped nodes (tests/support/kube_cluster.py),
with the CRDs GKE would have installed (tests/support/kube_crds.py).

What stands in:
- the existing cluster (`gke.cluster`): a record in the gcp stand-in's state that `getCluster`
  answers (tests/support/standins/gcp_container.py), whose `endpoint` and CA are the control
  plane's;
- `gke-gcloud-auth-plugin`: a script on PATH printing the ExecCredential the real plugin prints
  (tests/support/fakes/kube_api.py `write_auth_plugin`, after kubernetes/cloud-provider-gcp
  `cmd/gke-gcloud-auth-plugin/cred.go`), with a token the API server accepts for an
  administrator (`--token-auth-file`): GKE maps the deployer's Google identity to RBAC through
  IAM, which no local server can;
- the Google APIs the stack calls itself (Secret Manager, the registry) and the gcp provider, as
  in the VM's engine tests.

Not here: GKE's node auto-provisioning (kwok's nodes exist before the pods ask), ingress-gce
and the cloud load balancer (the Service is not awaited: components/gke/k8s_workload.py), the
Secrets Store CSI driver mounting anything (kwok runs no kubelet), and the scripts inside the
pods: kwok marks a Job's pod Succeeded without running it (its `pod-complete` stage), so a
completed readiness Job here proves the Job was made, scheduled and awaited by the provider, not
what its script checks (tests/loopback/test_gke_readiness_job.py runs that script against a real
server).
"""

from __future__ import annotations

import base64
import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support import engine_cli, kube_cluster, kube_crds
from tests.support.engine_stack import (
    HF_TOKEN,
    PROJECT,
    EngineStack,
    copy_project,
    nightly_registry,
    shared_env,
)
from tests.support.fakes.hf_hub import FakeHfHub
from tests.support.fakes.kube_api import write_auth_plugin
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.registry import Registry
from tests.support.standins import gcp_container
from tests.support.standins.store import Store

STACK = "v6e4-gke"
#: The existing cluster the stack is pointed at (`tpu-vllm:gke.cluster`).
CLUSTER = "shared-tpus"
LOCATION = "us-east5"
CLUSTER_PATH = f"projects/{PROJECT}/locations/{LOCATION}/clusters/{CLUSTER}"
#: A version past both floors the program checks (components/catalog.py).
MASTER_VERSION = "1.34.1-gke.1829001"
#: Nodes kwok plays: one untainted system node (the readiness Job's), and one TPU node per
#: replica plus one for the rolling update's surge (maxSurge 1).
TPU_NODES = 3


@dataclass
class GkeFakes:
    """The control plane standing for the existing cluster, and the Google APIs beside it."""

    plane: kube_cluster.ControlPlane
    secret_manager: FakeSecretManager
    hub: FakeHfHub
    registry: Registry
    standin_state: Path
    buckets: Path
    plugin_dir: Path
    #: What stops them all, last started first.
    running: contextlib.ExitStack

    @classmethod
    def start(cls, work: Path, compute_class: str) -> GkeFakes:
        token = secrets.token_urlsafe(24)
        with contextlib.ExitStack() as started:
            (work / "kube").mkdir()
            plane = started.enter_context(kube_cluster.running(work / "kube", deployer_token=token))
            plane.add_node(kube_cluster.system_node("system-0"))
            for i in range(TPU_NODES):
                plane.add_node(kube_cluster.tpu_node(f"tpu-{i}", compute_class))
            for crd in kube_crds.gke_crds():
                plane.install_crd(crd)
            secret_manager = FakeSecretManager()
            secret_manager.start()
            started.callback(secret_manager.stop)
            hub = FakeHfHub().start()
            started.callback(hub.stop)
            hub.models["google/gemma-4-31B-it"] = True  # gated, as on the Hub
            hub.add_token(HF_TOKEN, granted=("google/gemma-4-31B-it",))
            registry = nightly_registry(work)
            started.callback(registry.stop)
            # On the engine's PATH: the auth plugin, and pulumi-kubernetes' provider alone of the
            # built tools (as tests/support/engine_cli.py links real tools one by one).
            plugin_dir = work / "auth-plugin"
            plugin_dir.mkdir()
            write_auth_plugin(plugin_dir, token)
            provider = plane.bin / "pulumi-resource-kubernetes"
            (plugin_dir / provider.name).symlink_to(provider)
            state, buckets = work / "standin-state", work / "buckets"
            state.mkdir()
            buckets.mkdir()
            seed_cluster(state, plane)
            # All up: stop() stops them from now on (the stack is kept, not dropped, so the
            # control plane's context is exited only then).
            running = started.pop_all()
        return cls(plane, secret_manager, hub, registry, state, buckets, plugin_dir, running)

    def env(self) -> dict[str, str]:
        return {
            "GOOGLE_OAUTH_ACCESS_TOKEN": self.secret_manager.token,
            **shared_env(self.secret_manager, self.hub, self.standin_state, self.buckets),
        }

    def problems(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{self.plane.log_tail(name, 15)}"
            for name in ("kube-apiserver", "kube-controller-manager", "kwok")
        )

    def stop(self) -> None:
        self.running.close()


def seed_cluster(state: Path, plane: kube_cluster.ControlPlane) -> None:
    """The existing cluster as `getCluster` reads it: Workload Identity, the Secret Manager
    add-on, managed collection on, and the control plane's address and CA."""
    ca = base64.b64encode(plane.pki.ca.read_bytes()).decode()
    Store(gcp_container.CLUSTERS, state).put(
        CLUSTER_PATH,
        {
            "name": CLUSTER,
            "project": PROJECT,
            "location": LOCATION,
            "endpoint": f"127.0.0.1:{plane.port}",
            "masterVersion": MASTER_VERSION,
            "masterAuth": {"clusterCaCertificate": ca},
            "workloadIdentityConfig": {"workloadPool": f"{PROJECT}.svc.id.goog"},
            "secretManagerConfig": {"enabled": True},
            "monitoringConfig": {
                "enableComponents": ["SYSTEM_COMPONENTS"],
                "managedPrometheus": {"enabled": True},
            },
            "releaseChannel": {"channel": "REGULAR"},
        },
    )


@contextlib.contextmanager
def gke_engine_stack(tmp: Path, compute_class: str) -> Iterator[EngineStack[GkeFakes]]:
    """The project copied, the control plane and fakes started, the README's first steps for a
    GKE stack on an existing cluster: a file backend, the stack, `gcp:project`, who may
    connect, `gke.cluster`, and the HF token stored with `scripts/save_hf_token.py`."""
    engine_cli.tools()
    project = copy_project(tmp, STACK)
    fakes = GkeFakes.start(tmp, compute_class)
    try:
        env = {**engine_cli.environment(tmp), **fakes.env()}
        env["PATH"] = f"{fakes.plugin_dir}:{env['PATH']}"
        env["PULUMI_DEBUG_COMMANDS"] = "true"
        engine = EngineStack(STACK, tmp, project, fakes, env)
        engine.pulumi("login", env["PULUMI_BACKEND_URL"]).check()
        engine.pulumi("stack", "select", "--create", STACK).check()
        engine.config_set("gcp:project", PROJECT)
        engine.config_set("tpu-vllm:access.allowedCidrs[0]", "127.0.0.0/8", "--path")
        engine.config_set("tpu-vllm:gke.cluster", CLUSTER, "--path")
        engine.config_set("tpu-vllm:vllm.registryEndpoint", fakes.registry.url, "--path")
        engine.python(
            "-m", "scripts.save_hf_token", "--stack", STACK, stdin=HF_TOKEN + "\n"
        ).check()
        yield engine
    finally:
        fakes.stop()
