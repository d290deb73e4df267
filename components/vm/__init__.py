"""The VM backend: one TPU VM from a flex-start queued resource, reached over SSH.

Its part of the flow and its imports: docs/architecture.md, "components/vm/". Why the dynamic
providers' old module paths stay: docs/architecture.md, "Dynamic providers".
"""
