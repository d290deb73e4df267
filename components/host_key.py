"""Alias for states that name this old path: docs/architecture.md "Dynamic providers"."""

from components.vm.host_key import NodeHostKeyProvider

__all__ = ["NodeHostKeyProvider"]
