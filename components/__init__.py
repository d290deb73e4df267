"""tpu-vllm's components: everything `__main__.py` builds, in a shared top and two backends
(vm/, gke/). The flow, what each package may import and what it must not: docs/architecture.md.
"""
