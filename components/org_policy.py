"""Alias for states that name this old path: docs/architecture.md "Dynamic providers"."""

from components.vm.org_policy import OrgPolicyGateProvider

__all__ = ["OrgPolicyGateProvider"]
