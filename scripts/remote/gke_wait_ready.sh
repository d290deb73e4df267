# Runs in the readiness Job's pod on GKE (components/k8s_manifests.py `readiness_job`), with
# /bin/sh of a small curl image. `pulumi up` waits for this Job to complete, so it is the
# GKE backend's "ready": at least one replica answers through the Service, which routes only to
# Ready pods. It mirrors the VM's wait_ready.py checks: /health answers 200, then /v1/models
# (with the API key) lists the model. The key goes from its mounted file down a pipe into curl's
# header (`-H @-`): never an argument, a variable or a log line. Values come from the Job's env.
# A refused /v1/models (HTTP 401/403: vLLM's answer to a key it was not started with) is never
# skipped: it fails the Job, naming the key as the likely cause, once it has lasted
# AUTH_GRACE_SECONDS (default 60; a pod of the previous template may answer for a moment while it
# terminates) or at the deadline, whichever comes first.
url="http://${TARGET_HOST}:${TARGET_PORT}"
deadline=${DEADLINE_SECONDS}
poll=${POLL_SECONDS:-10}
auth_grace=${AUTH_GRACE_SECONDS:-60}
auth_since=""
# No default: the Job always sets it (components/k8s_manifests.py, SECRETS_DIR); a guessed path
# would only turn a rendering mistake into 401s blamed on the key.
key_file=${API_KEY_FILE:?"is not set: the readiness Job must name its mounted API key file (components/k8s_manifests.py readiness_job)"}
start=$(date +%s)
last=""
say() {
  now=$(date +%s)
  printf '[%6ss] %s\n' "$((now - start))" "$1"
}
# note TEXT: remember TEXT as the last answer; print it when it differs from the one before.
note() {
  if [ "$1" != "$last" ]; then
    last=$1
    say "$last"
  fi
}
say "waiting for a Ready replica of ${MODEL} behind ${url} (a new flex-start node is found first)"
while :; do
  now=$(date +%s)
  if [ "$((now - start))" -ge "$deadline" ]; then
    say "no replica answered /v1/models within ${deadline}s (last: ${last:-no answer}). See: kubectl -n ${POD_NAMESPACE} get pods,events; kubectl -n ${POD_NAMESPACE} logs deploy/vllm" >&2
    exit 1
  fi
  if curl --silent --show-error --fail --max-time 10 --output /dev/null "${url}/health" 2>/dev/null; then
    code=$({ printf 'Authorization: Bearer '; cat "$key_file"; } \
      | curl --silent --max-time 30 --header @- --output /tmp/models.json \
        --write-out '%{http_code}' "${url}/v1/models") || code=000
    case "$code" in
      200)
        auth_since=""
        if grep -qF "\"${MODEL}\"" /tmp/models.json; then
          say "ready: /health 200 and /v1/models lists ${MODEL}"
          exit 0
        fi
        note "/v1/models answered without ${MODEL}"
        ;;
      401 | 403)
        now=$(date +%s)
        auth_since=${auth_since:-$now}
        note "/v1/models answered HTTP ${code}: the API key is the likely cause (the pods serve with another key than the Job's ${key_file}: a wrong or rotated key)"
        if [ "$((now - auth_since))" -ge "$auth_grace" ]; then
          say "FAILED: ${last}, for $((now - auth_since))s. Clients with the stack's api_key are refused too. Fix: restart the pods so they read the current key (kubectl -n ${POD_NAMESPACE} rollout restart deploy/vllm), then run pulumi up again" >&2
          exit 1
        fi
        ;;
      *)
        auth_since=""
        note "/health 200 but /v1/models answered HTTP ${code} (000: no answer); is the API key the one the pods mounted?"
        ;;
    esac
  else
    auth_since=""
    note "no Ready replica yet"
  fi
  sleep "$poll"
done
