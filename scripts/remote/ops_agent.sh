# Send vLLM's /metrics to Cloud Monitoring from this node: Google's Ops Agent with its
# Prometheus receiver (Cloud Monitoring docs "Collect Prometheus metrics" with the Ops Agent;
# GoogleCloudPlatform/ops-agent confgenerator/prometheus.go). Rendered by
# components/vm/metrics_agent.py; runs after the readiness check, so it never slows the
# server's start. Any failure is a warning, never an error: the server serves either way.
# The last stdout line is `TPU_VLLM_METRICS_AGENT ok` or `TPU_VLLM_METRICS_AGENT failed: WHY`.
CONFIG_DIR=@CONFIG_DIR@
INSTALLER_URL=@INSTALLER_URL@
# The collector unit the agent's oneshot `google-cloud-ops-agent` service starts, and the
# config its ExecStartPre generates from config.yaml into its RuntimeDirectory (ops-agent
# systemd/google-cloud-ops-agent-opentelemetry-collector.service: RuntimeDirectory=
# google-cloud-ops-agent-opentelemetry-collector, `--config=${RUNTIME_DIRECTORY}/otel.yaml`).
COLLECTOR=google-cloud-ops-agent-opentelemetry-collector
OTEL_CONFIG=@OTEL_CONFIG@
# Google's own integration tests install the agent with RunInstallFuncWithRetry (ops-agent
# integration_test/agents/agents.go): up to 5 retries, 30 s apart, of errors that look
# transient: isRetriableInstallError's texts for Ubuntu and any platform (apt's mirror caught
# mid-sync; "Resource temporarily unavailable"), plus apt's "Could not get lock", which a
# fresh VM's unattended-upgrades can hold (ours). A failed download is retried too.
ATTEMPTS=6
RETRY_SECONDS=@RETRY_SECONDS@
COLLECTOR_WAIT_SECONDS=@COLLECTOR_WAIT_SECONDS@
TRANSIENT="Hash Sum mismatch|Mirror sync in progress|Clearsigned file isn't valid|Resource temporarily unavailable|Could not get lock"
report() { echo "TPU_VLLM_METRICS_AGENT $*"; exit 0; }
install_agent() {
  # The script adds Google's package repository for this distribution and installs the agent;
  # it refuses a distribution the agent does not support (Ubuntu 22.04 is supported:
  # ops-agent project.yaml, target `jammy`). Major version 2 only ("Install a specific
  # version": MAJOR.*.*): a new major release may change the configuration this file writes.
  local attempt=1
  while :; do
    if ! curl --silent --show-error --fail --location --max-time 120 \
        --output ~/.tpu-vllm/add-google-cloud-ops-agent-repo.sh "$INSTALLER_URL"; then
      why="could not download $INSTALLER_URL"
    elif timeout 600 sudo bash ~/.tpu-vllm/add-google-cloud-ops-agent-repo.sh --also-install \
        '--version=2.*.*' > ~/.tpu-vllm/ops-agent-install.log 2>&1; then
      return 0
    else
      tail -n 20 ~/.tpu-vllm/ops-agent-install.log >&2
      why="the Ops Agent did not install (log: ~/.tpu-vllm/ops-agent-install.log)"
      grep -Eq "$TRANSIENT" ~/.tpu-vllm/ops-agent-install.log || report "failed: $why"
    fi
    if [ "$attempt" -ge "$ATTEMPTS" ]; then
      report "failed: $why, $ATTEMPTS tries"
    fi
    echo "metrics-agent: try $attempt of $ATTEMPTS failed ($why); again in $RETRY_SECONDS s"
    sleep "$RETRY_SECONDS"
    attempt=$((attempt + 1))
  done
}
mkdir -p ~/.tpu-vllm
if ! systemctl list-unit-files google-cloud-ops-agent.service 2>/dev/null | grep -q google-cloud-ops-agent; then
  echo "metrics-agent: installing the Ops Agent (Google's add-google-cloud-ops-agent-repo.sh --also-install)"
  install_agent
fi
sudo mkdir -p "$CONFIG_DIR"
sudo tee "$CONFIG_DIR/config.yaml" > /dev/null <<'TPU_VLLM_OPS_AGENT_CONFIG'
@CONFIG_YAML@
TPU_VLLM_OPS_AGENT_CONFIG
# When the collector last became active, before the restart: it must do so again after it.
since=$(systemctl show -p ActiveEnterTimestampMonotonic --value "$COLLECTOR" 2>/dev/null || true)
if ! sudo systemctl restart google-cloud-ops-agent; then
  report "failed: google-cloud-ops-agent did not restart (sudo journalctl -u google-cloud-ops-agent)"
fi
# The collector restarts with the oneshot (its unit is PartOf= it), and `systemctl restart`
# returns once the oneshot is done, not the collector: it may still be activating, with the
# previous otel.yaml in place (RuntimeDirectoryPreserve=yes) until its ExecStartPre writes the
# new one. So wait, up to COLLECTOR_WAIT_SECONDS, for it to have entered "active" anew, as
# Google's own tests wait after a restart (integration_test/agents/agents.go RestartOpsAgent).
waited=0
while :; do
  entered=$(systemctl show -p ActiveEnterTimestampMonotonic --value "$COLLECTOR" 2>/dev/null || true)
  if systemctl is-active --quiet "$COLLECTOR" && [ "${entered:-0}" -gt "${since:-0}" ]; then
    break
  fi
  if [ "$waited" -ge "$COLLECTOR_WAIT_SECONDS" ]; then
    report "failed: the metrics collector $COLLECTOR is not active ${waited} s after the agent's restart (sudo journalctl -u $COLLECTOR)"
  fi
  sleep 1
  waited=$((waited + 1))
done
# google-cloud-ops-agent is a oneshot that only starts the sub-agents (ops-agent
# systemd/google-cloud-ops-agent.service): its being active proves no scraping. The collector
# must run, and its generated config must hold this stack's job: the config generator drops
# the Prometheus pipeline, with only a log line, when it cannot read the instance's metadata
# (confgenerator/prometheus.go `Pipelines`: "can't get resource metadata").
if ! sudo grep -Eq "job_name: [\"']?@JOB@[\"']?[[:space:]]*$" "$OTEL_CONFIG" 2>/dev/null; then
  why="the agent drops the Prometheus receiver when it cannot read the instance's metadata"
  report "failed: the collector's generated config $OTEL_CONFIG has no scrape job @JOB@ ($why: sudo journalctl -u $COLLECTOR)"
fi
echo "metrics-agent: scraping http://localhost:@PORT@/metrics every @INTERVAL@ s as job @JOB@"
report ok
