"""tpu-vllm's components: everything `__main__.py` builds, in a shared top and two backends.

The flow, one way: config -> the backend's resources -> outputs. `__main__.py` loads the
validated `StackConfig` (components/config/), runs the lookups that stop a run before any
resource (`secrets.require_hf_token_secret`, `dns.require_managed_zone`), then calls one
backend's builder, picked by `tpu-vllm:backend`:
- components/vm/ (`build_vm`): one TPU VM from a flex-start queued resource, reached over SSH;
- components/gke/ (`build_gke`): N flex-start TPU replicas in GKE behind one address.
Both return `outputs.BackendOutputs`, which `__main__.py` exports as the output contract.

This top level is what both backends use (the shared top):
- config/: the stack's configuration, its keys in one table (a package of its own);
- catalog: chips, models, prices, zones; naming: ids and labels derived from the stack name;
- secrets: the API key and the HF token in Secret Manager, and who may read them;
- compile_cache, jax_cache_env: the XLA compile cache's bucket and key, JAX's cache settings;
- remote_scripts: what both backends' node-side scripts (scripts/remote/) agree on;
- dns: the endpoint's stable name; renewal: the renewal window (also scripts/renew.py);
- ssh_dial: pulumi-command's SSH dial budget (the VM's connections, config's warning);
- outputs, messages: the outputs' shape, how errors read.
Three more modules, queued_resource, org_policy and host_key, are not part of it: they are the
old module paths of the VM backend's dynamic providers, kept so that the provider pickles in
stacks deployed before components/vm/ existed still load (see each one's docstring).

May import: a shared module imports other shared modules (components.config included) and
third-party libraries. Must not import: components.vm or components.gke. A shared module that
needed one backend would tie the other to it; what both need moves up here instead. Each backend
package may import the shared top and itself, never the other backend; a module here is used
by both backends or by `__main__.py`, else it belongs in the one backend that uses it. Names
used across modules are public (no `_private` imports). tests/mocked/test_layout.py enforces these
rules, and that no module here is longer than about 500 lines.
"""
