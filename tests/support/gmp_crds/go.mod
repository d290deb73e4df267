module tpu-vllm/tests/support/gmp_crds

go 1.26.7

require github.com/GoogleCloudPlatform/prometheus-engine v0.17.2
