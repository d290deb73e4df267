module tpu-vllm/tests/gmp_crds

go 1.26.7

require github.com/GoogleCloudPlatform/prometheus-engine v0.17.2
