"""The GKE backend (`tpu-vllm:backend: gke`): N flex-start TPU replicas in a GKE cluster behind
one reserved load-balancer address, each pod a whole single-host TPU slice.

Its part of the flow: `__main__.py` calls `backend.build_gke`, which registers:
- cluster: `GkeTpuCluster`, a created cluster (or a checked existing one: nap_limits reads its
  node auto-provisioning limits), the pods' Workload Identity and the reserved address;
- the DNS record, the secrets and the compile cache (shared: components/dns.py,
  components/secrets.py, components/compile_cache.py);
- k8s_workload: `GkeWorkload`, a Kubernetes provider bound to the cluster and the objects it
  creates: the wait until the cluster serves the CRDs of the class and the secret mounts
  (crd_wait, a dynamic provider; kube_api reads the cluster as the deployer, crd_schema judges
  the served schema), the stack's ComputeClass (compute_class: GKE creates and recycles the
  flex-start TPU nodes), the namespace, the Deployment, the Service, the PodDisruptionBudget
  and the readiness Job, all built as plain manifests (k8s_manifests; pod_resources and
  pod_security for the pods' requests and security contexts; cache_manifests for the compile
  cache's init container and sidecar; readiness_manifests for the readiness Job and its Role;
  pod_owner for the owner whose delete waits for the pods, so `pulumi destroy` removes them
  first), a dry run of the pods before they change (pod_admission) and a watch that reports the
  Job's pod's scheduling (readiness_watch; both dynamic providers, progress lines through
  progress); then returns its `BackendOutputs`.

May import: the shared top of components/ (components.config, catalog, naming, secrets,
compile_cache, jax_cache_env, remote_scripts, dns, renewal, outputs, messages) and its own
modules; scripts/ may import it (scripts/budget.py reads the timeouts).
Must not import: components.vm. What both backends need belongs in the shared top.
"""
