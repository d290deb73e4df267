"""State alias: `components.host_key.NodeHostKeyProvider`, the path states written before
components/vm/ existed name; the class is `components.vm.host_key.NodeHostKeyProvider`.

Nothing in the program imports this module; the provider host does, to unpickle such a
state's `__provider`. Why it must stay: components/vm/__init__.py, "Dynamic providers".
"""

from components.vm.host_key import NodeHostKeyProvider

__all__ = ["NodeHostKeyProvider"]
