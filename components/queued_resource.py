"""State alias: `components.queued_resource.QueuedResourceProvider`, the path states written before
components/vm/ existed name; the class is `components.vm.queued_resource.QueuedResourceProvider`.

Nothing in the program imports this module; the provider host does, to unpickle such a
state's `__provider`. Why it must stay: components/vm/__init__.py, "Dynamic providers".
"""

from components.vm.queued_resource import QueuedResourceProvider

__all__ = ["QueuedResourceProvider"]
