"""The GKE backend: N flex-start TPU replicas in a GKE cluster behind one address.

Its part of the flow and its imports: docs/architecture.md, "components/gke/".
"""
