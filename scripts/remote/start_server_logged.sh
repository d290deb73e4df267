# (Re)start the vLLM container, its log sent to Cloud Logging (`monitoring.enabled`). Rendered by
# components/vm/node_scripts.py: `set -euo pipefail` first, then this, with the `docker run` line
# one flag per line so a preview diff shows exactly which flag changed. Prints only the new
# container's id on stdout. start_server.sh is the same without the log driver.
@SERVER_PRELUDE@
LOG_FLAGS=(@LOG_FLAGS@)
deadline=$((SECONDS + @LOG_DRIVER_WAIT@))
while :; do
  sudo docker rm -f @CONTAINER@ >/dev/null 2>&1 || true
  if @DOCKER_RUN@ 2>~/.tpu-vllm/docker-run.err; then
    cat ~/.tpu-vllm/docker-run.err >&2
    break
  fi
  # The gcplogs driver could not write to Cloud Logging ("failed to initialize logging driver"):
  # a fresh IAM grant can take minutes to reach it. Other failures stop here, as they did.
  if [ "${#LOG_FLAGS[@]}" -gt 0 ] && grep -q "logging driver" ~/.tpu-vllm/docker-run.err; then
    if [ "$SECONDS" -lt "$deadline" ]; then
      echo "start-server: Cloud Logging refused the container's log driver; retrying in @LOG_DRIVER_RETRY@ s: $(grep -m1 "logging driver" ~/.tpu-vllm/docker-run.err)" >&2
      sleep @LOG_DRIVER_RETRY@
      continue
    fi
    echo "start-server: warning: Cloud Logging still refuses the log driver after @LOG_DRIVER_WAIT@ s:" \
      "$(grep -m1 "logging driver" ~/.tpu-vllm/docker-run.err)" >&2
    echo "start-server: warning: starting the server with Docker's default log driver," \
      "so its log stays on this node" >&2
    LOG_FLAGS=()
    continue
  fi
  cat ~/.tpu-vllm/docker-run.err >&2
  exit 1
done
