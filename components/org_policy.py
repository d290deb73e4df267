"""Alias for states that name this old path: docs/tpu-request.md "Provider code and state"."""

from components.vm.org_policy import OrgPolicyGateProvider

__all__ = ["OrgPolicyGateProvider"]
