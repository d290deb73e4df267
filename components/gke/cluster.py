"""GkeTpuCluster: the cluster (created or existing), the pods' Workload Identity, and the
reserved address the Service serves on.

No TPU node pool: the stack's ComputeClass (compute_class.py) creates and recycles the TPU
nodes; preflight.py stops a cluster that cannot carry that class before anything is
created. Why, the version floors and why not queued provisioning: docs/gke.md "Prerequisites",
"What it creates".
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.config import (
    AccessSettings,
    GkeSettings,
    ModelSettings,
    MonitoringSettings,
    StackConfig,
    TpuSettings,
)
from components.gke import k8s_manifests
from components.gke.preflight import RELEASE_CHANNEL, Preflight, cluster_path
from components.naming import resource_id, stack_labels

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: The system pods' and the readiness Job's node.
SYSTEM_MACHINE_TYPE = "e2-standard-4"
WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"
#: Set, not the provider's defaults, so scripts/budget.py can add them up.
CLUSTER_TIMEOUT = "40m"
NODE_POOL_TIMEOUT = "30m"


def workload_identity_member(project: str, namespace: str, ksa: str) -> str:
    """The IAM member a KSA acts as under GKE Workload Identity (GKE docs)."""
    return f"serviceAccount:{project}.svc.id.goog[{namespace}/{ksa}]"


def kubeconfig(name: str, endpoint: str | None, ca_certificate: str | None) -> str:
    """Authenticates with `gke-gcloud-auth-plugin`, as the deployer: no secret in it."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://{endpoint or "CLUSTER-ENDPOINT"}
    certificate-authority-data: {ca_certificate or ""}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      installHint: gcloud components install gke-gcloud-auth-plugin
      provideClusterInfo: true
"""


@dataclass(frozen=True, kw_only=True)
class GkeTpuClusterArgs:
    """The sections the cluster reads, and what `preflight` learned of the cloud before it."""

    project: str
    stack: str
    gke: GkeSettings
    access: AccessSettings
    model: ModelSettings
    tpu: TpuSettings
    monitoring: MonitoringSettings
    checked: Preflight

    @classmethod
    def of(cls, config: StackConfig, checked: Preflight) -> GkeTpuClusterArgs:
        return cls(
            project=config.project,
            stack=config.stack,
            gke=config.gke,
            access=config.access,
            model=config.model,
            tpu=config.tpu,
            monitoring=config.monitoring,
            checked=checked,
        )


class GkeTpuCluster(pulumi.ComponentResource):
    """Where the replicas run, who they are, and the address they answer on."""

    cluster: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    service_account_email: pulumi.Output[str]
    address: pulumi.Output[str]
    address_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeTpuClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:GkeTpuCluster", name, None, opts)
        settings = args.gke
        found = args.checked.found
        #: Whether vLLM's metrics can be collected (a created cluster switches it on).
        self.managed_collection = args.checked.managed_collection
        child = pulumi.ResourceOptions(parent=self)
        self.system_pool: gcp.container.NodePool | None = None
        self.service_account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=args.project,
            account_id=resource_id(args.stack),
            display_name=f"tpu-vllm workload ({args.stack})",
            description="Identity of the vLLM pods (Workload Identity); reads only its own "
            "secrets and compile cache.",
            opts=child,
        )
        self.service_account_email = self.service_account.email
        created: gcp.container.Cluster | None = None
        if found is None:
            created = self._create_cluster(name, args, settings)
            cluster_name: pulumi.Input[str] = created.name
            endpoint: pulumi.Input[str | None] = created.endpoint
            ca: pulumi.Input[str | None] = created.master_auth.apply(
                lambda auth: getattr(auth, "cluster_ca_certificate", None)
            )
        else:
            cluster_name = settings.existing_cluster
            endpoint = getattr(found, "endpoint", None)
            auths = getattr(found, "master_auths", None) or []
            ca = auths[0].cluster_ca_certificate if auths else None
        ns = k8s_manifests.namespace_name(args.stack)
        # IAM refuses `PROJECT.svc.id.goog[...]` members ("Error 400: Identity Pool does not
        # exist") until the project's first Workload Identity cluster exists: a cluster this
        # stack creates must come first (terraform-google-kubernetes-engine PR #301 fixed the
        # same race by tying the binding to the cluster). An existing cluster has the pool.
        self.workload_identity = gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity",
            service_account_id=self.service_account.name,
            role=WORKLOAD_IDENTITY_USER,
            member=workload_identity_member(settings.cluster_project, ns, k8s_manifests.KSA),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[created] if created else [])
            ),
        )
        #: Every node pool this stack made (the system pool of a cluster it creates): pods wait
        #: for them (and go before them on destroy). TPU pools are the ComputeClass's.
        self.node_pools = self._own_pools()
        self.reserved_address = gcp.compute.Address(
            f"{name}-address",
            name=resource_id(args.stack, "-lb"),
            project=settings.cluster_project,
            region=settings.region,
            address_type="EXTERNAL",
            network_tier="PREMIUM",
            description=f"tpu-vllm {args.stack}: the endpoint's stable address",
            labels=stack_labels(args.stack),
            opts=child,
        )
        # Unknown only under mocks that know no cloud outputs; never None in the outputs.
        self.address = self.reserved_address.address.apply(lambda ip: ip or "")
        #: What the Service names (GKE looks the address up by name in the cluster's region).
        self.address_name = self.reserved_address.name
        self.cluster = pulumi.Output.from_input(cluster_name).apply(
            lambda n: cluster_path(settings, n)
        )
        context = f"gke_{settings.cluster_project}_{settings.location}_{resource_id(args.stack)}"
        self.kubeconfig = pulumi.Output.all(endpoint, ca).apply(
            lambda parts: kubeconfig(context, parts[0], parts[1])
        )
        self.register_outputs(
            {
                "cluster": self.cluster,
                "service_account_email": self.service_account_email,
                "address": self.address,
            }
        )

    def _own_pools(self) -> list[gcp.container.NodePool]:
        return [self.system_pool] if self.system_pool is not None else []

    def _create_cluster(
        self, name: str, args: GkeTpuClusterArgs, settings: GkeSettings
    ) -> gcp.container.Cluster:
        cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=resource_id(args.stack),
            project=settings.cluster_project,
            location=settings.location,
            description=f"tpu-vllm {args.stack}: flex-start TPU replicas of {args.model.id}",
            # No default node pool: the API needs one node to create the cluster, then the
            # provider deletes it; the system pool below and the ComputeClass's TPU pools are
            # the only ones.
            remove_default_node_pool=True,
            initial_node_count=1,
            # A release channel keeps the control plane current: the ComputeClass's TPU pools
            # need catalog.GKE_MIN_CLASS_AUTO_CREATION_VERSION; the channel's default is checked
            # against it before anything is created (preflight.py `check_channel_version`).
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=RELEASE_CHANNEL),
            # `access.network`, as for the VM path's node (auto-mode: the region's subnet).
            network=args.access.network,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(),
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{settings.cluster_project}.svc.id.goog"
            ),
            secret_manager_config=gcp.container.ClusterSecretManagerConfigArgs(enabled=True),
            # SYSTEM_COMPONENTS named: left out, the provider sends an empty set, which GKE
            # reads as "all monitoring off" (google-beta resource_container_cluster.go
            # `expandMonitoringConfig`).
            monitoring_config=(
                gcp.container.ClusterMonitoringConfigArgs(
                    enable_components=["SYSTEM_COMPONENTS"],
                    managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(
                        enabled=True
                    ),
                )
                if args.monitoring.enabled
                else None
            ),
            resource_labels=stack_labels(args.stack),
            # `pulumi destroy` must be able to delete what `pulumi up` made.
            deletion_protection=False,
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=CLUSTER_TIMEOUT, update=CLUSTER_TIMEOUT
                ),
            ),
        )
        self.system_pool = gcp.container.NodePool(
            f"{name}-system-pool",
            name="system",
            project=settings.cluster_project,
            location=settings.location,
            cluster=cluster.name,
            node_locations=[args.tpu.zones[0]],
            node_count=1,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=SYSTEM_MACHINE_TYPE,
                disk_size_gb=50,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                resource_labels=stack_labels(args.stack),
            ),
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=_pool_timeouts()),
        )
        return cluster


def _pool_timeouts() -> pulumi.CustomTimeouts:
    return pulumi.CustomTimeouts(create=NODE_POOL_TIMEOUT, update=NODE_POOL_TIMEOUT)
