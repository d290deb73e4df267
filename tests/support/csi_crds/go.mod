// The Secrets Store CSI driver's CRDs (SecretProviderClass), taken from its Go module for the
// Kubernetes layer's API server (tests/support/kube_crds.py); never copied in.
module tpu-vllm/tests/support/csi_crds

go 1.26.6

require sigs.k8s.io/secrets-store-csi-driver v1.5.3
