"""The VM backend (`tpu-vllm:backend: vm`, the default): one TPU VM from a flex-start queued
resource, serving vLLM in Docker, reached over SSH.

Its part of the flow: `__main__.py` calls `backend.build_vm`, which registers, in order:
- ssh: the stack's SSH key and the node metadata that installs it;
- tpu: `FlexStartTpu`, the org-policy gate (org_policy, checked before any TPU is requested),
  the node's service account, the queued resource (queued_resource and its _spec, _create and
  _delete siblings: a dynamic provider over the TPU v2alpha1 API, tpu_api, with
  google_credentials) and the firewall;
- host_key: the node's SSH host key, read through the TPU API and pinned;
- the secrets (shared: components/secrets.py) and secrets_fetch, their copy onto the node, a
  child of the shared component; the compile cache (shared: components/compile_cache.py);
- vllm: the server's container and the readiness check that waits for it, their scripts
  rendered by node_scripts;
- the DNS record, last (shared: components/dns.py), then returns its `BackendOutputs`.

May import: the shared top of components/ (components.config, catalog, naming, secrets,
compile_cache, remote_scripts, dns, renewal, ssh_dial, outputs, messages) and its own modules;
scripts/ may import it (scripts/renew.py uses tpu_api, scripts/save_hf_token.py
google_credentials).
Must not import: components.gke. What both backends need belongs in the shared top.

Dynamic providers (queued_resource, org_policy, host_key): Pulumi keeps each dynamic resource's
provider in the stack's state as the `__provider` property, a dill pickle that names the
provider class by module path (pulumi/dynamic/dynamic.py `serialize_provider`). The provider
host unpickles the one in the state for `delete` and `read` (pulumi/dynamic/__main__.py
`get_provider`, from `request.properties`), and a resource whose diff finds no change keeps the
`__provider` of its last create or update, possibly for good. So moving or renaming one of these
modules needs an alias at the old path: components/queued_resource.py, components/org_policy.py
and components/host_key.py are the paths of states written before components/vm/ existed, and
stay (tests/mocked/test_provider_state.py unpickles providers taken before the move). The move
itself is no change to such a stack: each provider's `diff` ignores `__provider`.
"""
