"""The VM backend (`tpu-vllm:backend: vm`, the default): one TPU VM from a flex-start queued
resource, serving vLLM in Docker, reached over SSH.

Its part of the flow: `__main__.py` calls `backend.build_vm`, which registers, in order:
- ssh: the stack's SSH key and the node metadata that installs it;
- tpu: `FlexStartTpu`, the org-policy gate (org_policy, checked before any TPU is requested),
  the node's service account, the queued resource (queued_resource and its _spec, _create and
  _delete siblings: a dynamic provider over the TPU v2alpha1 API, tpu_api) and the firewall;
- host_key: the node's SSH host key, read through the TPU API and pinned;
- the secrets fetched onto the node and the compile cache (shared: components/secrets.py,
  components/compile_cache.py);
- vllm: the server's container and the readiness check that waits for it;
- the DNS record, last (shared: components/dns.py), then returns its `BackendOutputs`.

May import: the shared top of components/ (components.config, catalog, naming, secrets,
compile_cache, remote_scripts, dns, renewal, ssh_dial, outputs, messages, google_credentials)
and its own modules; scripts/ may import it (scripts/renew.py uses tpu_api).
Must not import: components.gke. What both backends need belongs in the shared top.

The three dynamic providers (queued_resource, org_policy, host_key) are pickled into the stack's
state by module path: moving or renaming one of their modules needs an alias at the old path,
as components/queued_resource.py is (tests/test_provider_state.py).
"""
