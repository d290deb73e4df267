"""Alias for states that name this old path: docs/tpu-request.md "Provider code and state"."""

from components.vm.host_key import NodeHostKeyProvider

__all__ = ["NodeHostKeyProvider"]
