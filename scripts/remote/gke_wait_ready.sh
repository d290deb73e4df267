# Runs in the readiness Job's pod on GKE (components/k8s_manifests.py `readiness_job`), with
# /bin/sh of a small curl image. `pulumi up` waits for this Job to complete, so it is the
# GKE backend's "ready": at least one replica answers through the Service, which routes only to
# Ready pods. It mirrors the VM's wait_ready.py checks: /health answers 200, then /v1/models
# (with the API key) lists the model. The key goes from its mounted file down a pipe into curl's
# header (`-H @-`): never an argument, a variable or a log line. Values come from the Job's env.
url="http://${TARGET_HOST}:${TARGET_PORT}"
deadline=${DEADLINE_SECONDS}
poll=${POLL_SECONDS:-10}
key_file=${API_KEY_FILE:-/run/secrets/vllm_api_key}
start=$(date +%s)
last=""
say() {
  now=$(date +%s)
  printf '[%6ss] %s\n' "$((now - start))" "$1"
}
say "waiting for a Ready replica of ${MODEL} behind ${url} (a new flex-start node is found first)"
while :; do
  now=$(date +%s)
  if [ "$((now - start))" -ge "$deadline" ]; then
    say "no replica answered /v1/models within ${deadline}s (last: ${last:-no answer}). See: kubectl -n ${POD_NAMESPACE} get pods,events; kubectl -n ${POD_NAMESPACE} logs deploy/vllm" >&2
    exit 1
  fi
  if curl --silent --show-error --fail --max-time 10 --output /dev/null "${url}/health" 2>/dev/null; then
    if { printf 'Authorization: Bearer '; cat "$key_file"; } \
      | curl --silent --show-error --fail --max-time 30 --header @- --output /tmp/models.json \
        "${url}/v1/models"; then
      if grep -qF "\"${MODEL}\"" /tmp/models.json; then
        say "ready: /health 200 and /v1/models lists ${MODEL}"
        exit 0
      fi
      last="/v1/models answered without ${MODEL}"
    else
      last="/health 200 but /v1/models refused (is the API key the one the pods mounted?)"
    fi
  elif [ "$last" != "no Ready replica yet" ]; then
    last="no Ready replica yet"
    say "$last"
  fi
  sleep "$poll"
done
