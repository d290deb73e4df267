"""Alias for states that name this old path: docs/architecture.md "Dynamic providers"."""

from components.vm.queued_resource import QueuedResourceProvider

__all__ = ["QueuedResourceProvider"]
