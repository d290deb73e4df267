# Send vLLM's /metrics to Cloud Monitoring from this node: Google's Ops Agent with its
# Prometheus receiver (Cloud Monitoring docs "Collect Prometheus metrics" with the Ops Agent;
# GoogleCloudPlatform/ops-agent confgenerator/prometheus.go). Rendered by
# components/vm/metrics_agent.py; runs after the readiness check, so it never slows the
# server's start. Any failure is a warning, never an error: the server serves either way.
# The last stdout line is `TPU_VLLM_METRICS_AGENT ok` or `TPU_VLLM_METRICS_AGENT failed: WHY`.
CONFIG_DIR=@CONFIG_DIR@
INSTALLER_URL=@INSTALLER_URL@
report() { echo "TPU_VLLM_METRICS_AGENT $*"; exit 0; }
mkdir -p ~/.tpu-vllm
if ! systemctl list-unit-files google-cloud-ops-agent.service 2>/dev/null | grep -q google-cloud-ops-agent; then
  echo "metrics-agent: installing the Ops Agent (Google's add-google-cloud-ops-agent-repo.sh --also-install)"
  # The script adds Google's package repository for this distribution and installs the agent;
  # it refuses a distribution the agent does not support (Ubuntu 22.04 is supported:
  # ops-agent project.yaml, target `jammy`).
  if ! curl --silent --show-error --fail --location --max-time 120 \
      --output ~/.tpu-vllm/add-google-cloud-ops-agent-repo.sh "$INSTALLER_URL"; then
    report "failed: could not download $INSTALLER_URL"
  fi
  # Major version 2 only ("Install a specific version": MAJOR.*.*): a new major release may
  # change the configuration this file writes.
  if ! timeout 600 sudo bash ~/.tpu-vllm/add-google-cloud-ops-agent-repo.sh --also-install \
      '--version=2.*.*' > ~/.tpu-vllm/ops-agent-install.log 2>&1; then
    tail -n 20 ~/.tpu-vllm/ops-agent-install.log >&2
    report "failed: the Ops Agent did not install (log: ~/.tpu-vllm/ops-agent-install.log)"
  fi
fi
sudo mkdir -p "$CONFIG_DIR"
sudo tee "$CONFIG_DIR/config.yaml" > /dev/null <<'TPU_VLLM_OPS_AGENT_CONFIG'
@CONFIG_YAML@
TPU_VLLM_OPS_AGENT_CONFIG
if ! sudo systemctl restart google-cloud-ops-agent; then
  report "failed: google-cloud-ops-agent did not restart (sudo journalctl -u google-cloud-ops-agent)"
fi
if ! systemctl is-active --quiet google-cloud-ops-agent; then
  report "failed: google-cloud-ops-agent is not active (sudo journalctl -u google-cloud-ops-agent)"
fi
echo "metrics-agent: scraping http://localhost:@PORT@/metrics every @INTERVAL@ s as job @JOB@"
report ok
