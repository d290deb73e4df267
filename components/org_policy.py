"""State alias: the old path of `components.vm.org_policy.OrgPolicyGateProvider`.

Not part of the shared top of `components/`, and nothing in the program imports it. Pulumi keeps
each dynamic resource's provider in the stack's state as the `__provider` property, a dill pickle
that names the provider class by module path (pulumi/dynamic/dynamic.py `serialize_provider`). The
provider host unpickles the one in the state for `delete` and `read` (pulumi/dynamic/__main__.py
`get_provider`, from `request.properties`), and a resource whose diff finds no change keeps the
`__provider` of its last create or update. So a stack deployed before the VM backend moved to
components/vm/ holds `components.org_policy.OrgPolicyGateProvider` until that resource is next
replaced, possibly for good: keep this module (tests/test_provider_state.py checks that a pickle
taken before the move still resolves).
"""

from components.vm.org_policy import OrgPolicyGateProvider

__all__ = ["OrgPolicyGateProvider"]
