"""State alias: `components.org_policy.OrgPolicyGateProvider`, the path states written before
components/vm/ existed name; the class is `components.vm.org_policy.OrgPolicyGateProvider`.

Nothing in the program imports this module; the provider host does, to unpickle such a
state's `__provider`. Why it must stay: components/vm/__init__.py, "Dynamic providers".
"""

from components.vm.org_policy import OrgPolicyGateProvider

__all__ = ["OrgPolicyGateProvider"]
