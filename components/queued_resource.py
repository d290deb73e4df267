"""Alias for states that name this old path: docs/tpu-request.md "Provider code and state"."""

from components.vm.queued_resource import QueuedResourceProvider

__all__ = ["QueuedResourceProvider"]
