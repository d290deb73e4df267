"""GkeWorkload: the GKE backend's Kubernetes objects, and the readiness Job `pulumi up` waits on.

The Deployment and the Service are not awaited (`pulumi.com/skipAwait`): pulumi-kubernetes
would wait for every replica, N flex-start nodes at once. The Job completes once the rollout is
done and a replica answers through the Service. skipAwait also makes the Deployment's delete
return at once, hence its owner (pod_owner.py). Why and how: docs/gke.md "Readiness", "Destroy".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import remote_scripts
from components.compile_cache import CompileCache
from components.config import WorkloadSettings
from components.gke import (
    cache_manifests,
    compute_class,
    crd_wait,
    k8s_manifests,
    monitoring_manifests,
    pod_admission,
    pod_owner,
    readiness_manifests,
    readiness_watch,
)
from components.outputs import endpoint_urls
from components.secrets import NodeSecrets

#: Beyond the Job's own deadline, for the Job to be scheduled and its image pulled.
AWAIT_MARGIN_SECONDS = 300


@dataclass(frozen=True, kw_only=True)
class GkeWorkloadArgs:
    #: What the Kubernetes objects are rendered from (`StackConfig.workload_settings()`).
    settings: WorkloadSettings
    #: `NAME@sha256:...`, the pinned image every replica runs (components/image_pin.py).
    image: pulumi.Input[str]
    kubeconfig: pulumi.Input[str]
    #: `projects/P/locations/L/clusters/N`: GkeTpuCluster's `cluster` output.
    cluster: pulumi.Input[str]
    service_account_email: pulumi.Input[str]
    #: The reserved address: its IP names the endpoint, its NAME goes on the Service.
    address: pulumi.Input[str]
    address_name: pulumi.Input[str]
    #: The stack's secrets: where the pods find them, and the API key's version they mount.
    secrets: NodeSecrets
    #: What else the pods need first: the Workload Identity binding, the node pools.
    after: Sequence[pulumi.Resource] = field(default_factory=list)
    #: The compile cache's bucket and prefix; None when `cache.enabled` is off.
    cache: CompileCache | None = None
    #: The stable DNS name (`dns.*`) pointing at `address`, else None: the endpoint names the IP.
    hostname: pulumi.Input[str] | None = None
    #: Whether managed collection can scrape the pods (a PodMonitoring is created then).
    managed_collection: bool = False
    #: Addresses beside `access.allowedCidrs` that reach the Service: the uptime checkers.
    extra_source_ranges: list[str] = field(default_factory=list)


class GkeWorkload(pulumi.ComponentResource):
    """Namespace, identity, secrets mounts, the server Deployment, its address and readiness."""

    endpoint: pulumi.Output[str]
    endpoint_ip: pulumi.Output[str]
    openai_base_url: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeWorkloadArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:GkeWorkload", name, None, opts)
        config = args.settings
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=args.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self),
        )
        base = pulumi.ResourceOptions(parent=self, provider=self.provider)
        node_class = compute_class.compute_class(config, k8s_manifests.labels(config))
        # The CRDs of the class and of the secret mounts may come long after a new cluster
        # (components/gke/crd_wait.py): both kinds wait until the cluster serves them. Every
        # object waits too, the namespace first: a served ComputeClass schema that would prune
        # or refuse the class stops the run with nothing of the stack in the cluster.
        self.crds = self._served_crds(
            name, args.kubeconfig, args.cluster, node_class["spec"], args.managed_collection
        )
        after_crds = pulumi.ResourceOptions.merge(
            base, pulumi.ResourceOptions(depends_on=[self.crds])
        )
        ns_manifest = k8s_manifests.namespace(config)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=ns_manifest["metadata"], opts=after_crds
        )
        in_ns = pulumi.ResourceOptions.merge(
            base, pulumi.ResourceOptions(depends_on=[self.namespace])
        )
        # Cluster-scoped: where the TPU nodes come from, before any pod asks for one.
        self.compute_class = k8s.apiextensions.CustomResource(
            f"{name}-compute-class",
            api_version=node_class["apiVersion"],
            kind=node_class["kind"],
            metadata=node_class["metadata"],
            spec=node_class["spec"],
            opts=after_crds,
        )
        ksa = k8s_manifests.service_account(config, args.service_account_email)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa", metadata=ksa["metadata"], opts=in_ns
        )
        extras = None
        files = k8s_manifests.script_files()
        if args.cache is not None:
            extras = cache_manifests.compile_cache_extras(
                config, args.image, args.cache.prefix, config.cache.restore_timeout_seconds
            )
            files.update(cache_manifests.cache_script_files())
        scripts = k8s_manifests.scripts_config_map(config, files)
        self.scripts = k8s.core.v1.ConfigMap(
            f"{name}-scripts", metadata=scripts["metadata"], data=scripts["data"], opts=in_ns
        )
        key_version = args.secrets.api_key_version.apply(remote_scripts.version_of)
        secrets = args.secrets
        api_key = k8s_manifests.MountedSecret(
            remote_scripts.API_KEY_FILE, secrets.project, secrets.api_key_secret_id, key_version
        )
        hf_token = k8s_manifests.MountedSecret(
            remote_scripts.HF_TOKEN_FILE, secrets.project, secrets.hf_token_secret_id, "latest"
        )
        self.server_secrets = self._secret_provider_class(
            f"{name}-server-secrets",
            k8s_manifests.secret_provider_class(
                config, k8s_manifests.SERVER_SECRETS, [hf_token, api_key]
            ),
            pulumi.ResourceOptions.merge(in_ns, after_crds),
        )
        self.probe_secrets = self._secret_provider_class(
            f"{name}-probe-secrets",
            k8s_manifests.secret_provider_class(config, k8s_manifests.PROBE_SECRETS, [api_key]),
            pulumi.ResourceOptions.merge(in_ns, after_crds),
        )
        # What the pods use, which `pulumi destroy` must delete only once they are gone: the
        # pods' owner depends on it all, and its delete waits for the pods
        # (components/gke/pod_owner.py); the Deployment depends on the owner.
        used = [
            self.service_account,
            self.scripts,
            self.server_secrets,
            self.compute_class,
            *args.secrets.grants,
            *args.after,
            *([args.cache.writer] if args.cache is not None else []),
        ]
        owner = pod_owner.pods_owner(config)
        self.pods_owner = k8s.core.v1.ConfigMap(
            f"{name}-pods-owner",
            metadata=owner["metadata"],
            opts=pulumi.ResourceOptions.merge(
                in_ns,
                pulumi.ResourceOptions(
                    depends_on=used,
                    custom_timeouts=pulumi.CustomTimeouts(delete=pod_owner.DELETE_TIMEOUT),
                ),
            ),
        )
        deployment = k8s_manifests.deployment(
            config,
            image=args.image,
            api_key_version=key_version,
            files_digest=k8s_manifests.scripts_digest(files),
            extras=extras,
            owner_references=[
                pod_owner.owner_reference(
                    self.pods_owner.metadata.name, self.pods_owner.metadata.uid
                )
            ],
        )
        revision = pulumi.Output.from_input(deployment["spec"]["template"]).apply(
            k8s_manifests.digest
        )
        restore = config.cache.restore_timeout_seconds if args.cache is not None else 0
        job = readiness_manifests.readiness_job(
            config,
            revision,
            k8s_manifests.scripts_config_map_name(k8s_manifests.scripts_digest(files)),
            restore,
        )
        # Would the cluster admit these pods? Asked before either changes, so a namespace that
        # enforces more than the pods meet stops the run with nothing changed.
        self.admission = pod_admission.PodAdmission(
            f"{name}-pod-admission",
            pod_admission.PodAdmissionArgs(
                kubeconfig=args.kubeconfig,
                namespace=k8s_manifests.namespace_name(config.stack),
                pods=[
                    pod_admission.pod_of("server", deployment["spec"]["template"]),
                    pod_admission.pod_of("readiness", job["spec"]["template"]),
                ],
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, self.service_account]),
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=deployment["metadata"],
            spec=deployment["spec"],
            opts=pulumi.ResourceOptions.merge(
                in_ns,
                pulumi.ResourceOptions(depends_on=[*used, self.pods_owner, self.admission]),
            ),
        )
        # Not awaited (`pulumi.com/skipAwait`, see `k8s_manifests.service`): GKE programs the
        # load balancer while the first TPU node is found and the server starts.
        service = k8s_manifests.service(config, args.address_name)
        service["spec"]["loadBalancerSourceRanges"] += args.extra_source_ranges
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=service["metadata"],
            spec=service["spec"],
            opts=pulumi.ResourceOptions.merge(
                in_ns,
                pulumi.ResourceOptions(
                    # GKE will not convert a target-pool load balancer to the RBS one: a Service
                    # made before the annotation is made anew (docs/gke.md "What it creates").
                    replace_on_changes=["metadata.annotations"],
                    delete_before_replace=True,
                ),
            ),
        )
        budget = k8s_manifests.pod_disruption_budget(config)
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-disruption-budget",
            metadata=budget["metadata"],
            spec=budget["spec"],
            opts=in_ns,
        )
        # The Job reads the Deployment's rollout before it asks the Service.
        rollout_reader = self._grant(
            f"{name}-rollout-reader",
            readiness_manifests.rollout_reader_role(config),
            readiness_manifests.rollout_reader_binding(config),
            in_ns,
        )
        job_after: list[pulumi.Resource] = [
            self.deployment,
            self.service,
            self.probe_secrets,
            self.admission,
            *rollout_reader,
        ]
        wait = f"{readiness_manifests.job_seconds(config, restore) + AWAIT_MARGIN_SECONDS}s"
        self.ready = k8s.batch.v1.Job(
            f"{name}-ready",
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions.merge(
                in_ns,
                pulumi.ResourceOptions(
                    # The Deployment first: on an update, a Job created before the new pod
                    # template is applied would wait for the old generation, and pass against
                    # the old pods; and its Role, or its first read is refused.
                    depends_on=job_after,
                    custom_timeouts=pulumi.CustomTimeouts(create=wait, update=wait),
                    # The Job's name is fixed: the old one goes before a new one runs.
                    delete_before_replace=True,
                ),
            ),
        )
        # Beside the Job, not after it: says where its pod stands while pulumi-kubernetes waits.
        self.readiness_watch = readiness_watch.ReadinessWatch(
            f"{name}-ready-watch",
            readiness_watch.ReadinessWatchArgs(
                kubeconfig=args.kubeconfig,
                namespace=k8s_manifests.namespace_name(config.stack),
                job=readiness_manifests.READINESS_JOB,
                revision=revision,
                timeout_seconds=readiness_manifests.job_seconds(config, restore)
                + AWAIT_MARGIN_SECONDS,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=job_after),
        )
        self.pod_monitoring: k8s.apiextensions.CustomResource | None = None
        if args.managed_collection:
            # Once its CRD is served (managed collection installs it, crd_wait.py), and after
            # the readiness Job: scraping starts once the pods serve.
            monitor = monitoring_manifests.pod_monitoring(config)
            self.pod_monitoring = k8s.apiextensions.CustomResource(
                f"{name}-pod-monitoring",
                api_version=monitor["apiVersion"],
                kind=monitor["kind"],
                metadata=monitor["metadata"],
                spec=monitor["spec"],
                opts=pulumi.ResourceOptions.merge(
                    in_ns, pulumi.ResourceOptions(depends_on=[self.ready, self.crds])
                ),
            )
        # Depending on the Job means consumers never see an endpoint that does not serve yet.
        urls = endpoint_urls(args.address, args.hostname, config.vllm.port, self.ready.id)
        self.endpoint, self.endpoint_ip = urls.endpoint, urls.endpoint_ip
        self.openai_base_url = urls.openai_base_url
        self.register_outputs(urls.as_outputs())

    def _served_crds(
        self,
        name: str,
        kubeconfig: pulumi.Input[str],
        cluster: pulumi.Input[str],
        spec: Any,
        managed_collection: bool,
    ) -> crd_wait.ServedCrds:
        version = monitoring_manifests.API_VERSION.rsplit("/", 1)[1]
        monitored = [(crd_wait.POD_MONITORING_CRD, version)] if managed_collection else []
        return crd_wait.ServedCrds(
            f"{name}-crds",
            crd_wait.ServedCrdsArgs(
                kubeconfig=kubeconfig,
                cluster=cluster,
                crds=[
                    (crd_wait.COMPUTE_CLASS_CRD, compute_class.API_VERSION.rsplit("/", 1)[1]),
                    (
                        crd_wait.SECRET_PROVIDER_CLASS_CRD,
                        k8s_manifests.SPC_API_VERSION.rsplit("/", 1)[1],
                    ),
                    *monitored,
                ],
                compute_class_spec=spec,
            ),
            pulumi.ResourceOptions(parent=self),
        )

    def _grant(
        self,
        name: str,
        role: Mapping[str, Any],
        binding: Mapping[str, Any],
        opts: pulumi.ResourceOptions,
    ) -> list[pulumi.Resource]:
        """A Role and its binding to the pods' KSA (`NAME`, `NAME-binding`)."""
        made = k8s.rbac.v1.Role(name, metadata=role["metadata"], rules=role["rules"], opts=opts)
        bound = k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata=binding["metadata"],
            role_ref=binding["roleRef"],
            subjects=binding["subjects"],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[made])),
        )
        return [made, bound]

    @staticmethod
    def _secret_provider_class(
        name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions
    ) -> k8s.apiextensions.CustomResource:
        return k8s.apiextensions.CustomResource(
            name,
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=opts,
        )
