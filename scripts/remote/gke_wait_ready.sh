# Runs in the readiness Job's pod on GKE (components/gke/readiness_manifests.py `readiness_job`),
# with /bin/sh of a small curl image. `pulumi up` waits for this Job to complete, so it is the
# GKE backend's "ready", in two steps:
# 1. The Deployment has rolled out the generation this Job was created for (its
#    metadata.generation at the first read), as `kubectl rollout status` decides it
#    (kubernetes/kubectl pkg/polymorphichelpers/rollout_status.go): status.observedGeneration has
#    reached it, status.updatedReplicas has reached spec.replicas, no old replica is left; then
#    one replica is Ready (not all, on a create: flex-start nodes come when they come). The
#    Deployment is a rolling update with maxSurge 1 and maxUnavailable 0: the controller scales
#    the old ReplicaSet down only as new pods become available (pkg/controller/deployment/
#    rolling.go), and a pod is Ready only once its startup probe asked the model, so on an
#    update the last old replica goes only once every new one has answered; until then the old
#    ones serve through the Service. After this step only pods of this generation answer:
#    a terminating pod leaves the Service's ready endpoints at once, and kube-proxy falls back
#    to terminating endpoints only when none is ready (kubernetes/kubernetes
#    pkg/proxy/topology.go).
#    The progress condition (progressDeadlineSeconds, 600 s by default) is not a failure here,
#    as it is for kubectl: a flex-start capacity wait outlasts it; DEADLINE_SECONDS bounds it.
# 2. It mirrors the VM's wait_ready.py checks: /health answers 200, /v1/models (with the API
#    key) lists the model, then the model answers the same two questions through the Service
#    (`ask_model` below; CHAT_BODY and TOOL_BODY from the Job's env).
# The API key and the service-account token go from their mounted files down a pipe into curl's
# header (`-H @-`): never an argument, a variable or a log line. Values come from the Job's env.
# A refused /v1/models (HTTP 401, vLLM's answer to a key it was not started with; or 403, from a
# proxy or mesh policy in front of the pods, which the message names too) is never
# skipped: it fails the Job, naming the key as the likely cause, once it has lasted
# AUTH_GRACE_SECONDS (default 60) or at the deadline, whichever comes first; a refused Deployment
# read (no RBAC) fails it the same way, naming the Role.
url="http://${TARGET_HOST}:${TARGET_PORT}"
deadline=${DEADLINE_SECONDS}
poll=${POLL_SECONDS:-10}
auth_grace=${AUTH_GRACE_SECONDS:-60}
answer_seconds=${ANSWER_SECONDS:-120}
refused_since=""
# Scratch files: the Job's container's own /tmp (TMPDIR, as mktemp reads it, when set: the tests
# run several Jobs' scripts on one machine at once).
scratch=${TMPDIR:-/tmp}
# No default: the Job always sets it (components/gke/k8s_manifests.py, SECRETS_DIR); a guessed
# path would only turn a rendering mistake into 401s blamed on the key.
key_file=${API_KEY_FILE:?"is not set: the readiness Job must name its mounted API key file (components/gke/readiness_manifests.py readiness_job)"}
deployment=${DEPLOYMENT:?"is not set: the readiness Job must name the server Deployment (components/gke/readiness_manifests.py readiness_job)"}
# The API server from inside a pod: the kubernetes.default.svc name, the pod's token and CA
# (Kubernetes docs "Accessing the Kubernetes API from a Pod"). KUBERNETES_API: tests only.
account=${SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
api=${KUBERNETES_API:-https://kubernetes.default.svc}
deployment_url="${api}/apis/apps/v1/namespaces/${POD_NAMESPACE}/deployments/${deployment}"
role=tpu-vllm-rollout-reader
want=""
rolled_out=""
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
# refused TEXT FIX: note a refusal; once refusals have lasted the grace, fail with TEXT and FIX.
refused() {
  now=$(date +%s)
  refused_since=${refused_since:-$now}
  note "$1"
  if [ "$((now - refused_since))" -ge "$auth_grace" ]; then
    say "FAILED: ${last}, for $((now - refused_since))s. $2" >&2
    exit 1
  fi
}
# read_deployment: GET the Deployment into $scratch/deployment.json; prints the HTTP code.
read_deployment() {
  case "$api" in
    https://*) ca="${account}/ca.crt" ;;
    *) ca="" ;;
  esac
  { printf 'Authorization: Bearer '; cat "${account}/token"; } \
    | curl --silent --max-time 20 ${ca:+--cacert "$ca"} --header @- \
      --output "$scratch/deployment.json" --write-out '%{http_code}' "$deployment_url"
}
# field KEY TEXT: the number after the first "KEY": in TEXT (no whitespace), 0 when absent: the
# API server leaves zero counts out (apps/v1 DeploymentStatus fields are omitempty).
field() {
  printf '%s' "$2" | awk -v key="\"$1\":" '
    { at = index($0, key) }
    at && match(substr($0, at + length(key)), /^[0-9]+/) {
      print substr($0, at + length(key), RLENGTH); found = 1; exit
    }
    END { if (!found) print 0 }'
}
# rollout_done: 0 once the generation this Job waits for is rolled out and one replica of it is
# Ready; else 1, with a note of how far it is (exits on a refusal that outlasts the grace).
rollout_done() {
  code=$(read_deployment) || code=000
  case "$code" in
    200) refused_since="" ;;
    401 | 403)
      refused "the Kubernetes API answered HTTP ${code} for deployment ${deployment}: the Job's service account may not read it (Role ${role})" \
        "Fix: kubectl -n ${POD_NAMESPACE} get role,rolebinding ${role} (components/gke/readiness_manifests.py makes both), then run pulumi up again"
      return 1
      ;;
    *)
      refused_since=""
      note "the Kubernetes API answered HTTP ${code} for deployment ${deployment} (000: no answer)"
      return 1
      ;;
  esac
  # The API server indents JSON for a curl User-Agent (apiserver pkg/endpoints/handlers/
  # negotiation isPrettyPrint): drop all whitespace, then split at the top-level status, which
  # follows metadata and spec (managedFields name it "f:status", never "status").
  json=$(tr -d ' \t\r\n' <"$scratch/deployment.json")
  mark='"status":{'
  case "$json" in
    *"$mark"*)
      front=${json%%"$mark"*}
      status=${json#*"$mark"}
      ;;
    *)
      front=$json
      status=""
      ;;
  esac
  want=${want:-$(field generation "$front")}
  spec=$(field replicas "$front")
  observed=$(field observedGeneration "$status")
  replicas=$(field replicas "$status")
  updated=$(field updatedReplicas "$status")
  ready=$(field readyReplicas "$status")
  if [ "$observed" -lt "$want" ]; then
    note "rollout: waiting for the Deployment controller to observe generation ${want} (observed: ${observed})"
  elif [ "$updated" -lt "$spec" ]; then
    note "rollout: ${updated} of ${spec} replicas of generation ${want} created, one at a time; the old ones serve until each new one has answered"
  elif [ "$replicas" -gt "$updated" ]; then
    old=$((replicas - updated))
    [ "$old" -eq 1 ] && olds="1 old one" || olds="${old} old ones"
    note "rollout: ${updated} replicas of generation ${want}, ${olds} still running: they serve until the last new one has answered, then terminate"
  elif [ "$ready" -lt 1 ]; then
    note "rollout: ${updated} replicas of generation ${want}, none Ready yet (a new flex-start node is found first)"
  else
    say "rollout: generation ${want} rolled out, ${ready} of ${spec} replicas Ready"
    return 0
  fi
  return 1
}
# ask NAME BODY: POST BODY to /v1/chat/completions through the Service, the key down a pipe as
# for /v1/models; the answer in $scratch/NAME.json; prints the HTTP code (000: none in time).
ask() {
  { printf 'Authorization: Bearer '; cat "$key_file"; } \
    | curl --silent --max-time "$answer_seconds" --header @- \
      --header 'Content-Type: application/json' \
      --data-binary "$2" \
      --output "$scratch/$1.json" \
      --write-out '%{http_code}' \
      "${url}/v1/chat/completions" || true
}
# no_answer WHAT CODE NAME: fail the Job, quoting the status and the body's first 500 bytes.
no_answer() {
  body=$(head -c 500 "$scratch/$3.json" 2>/dev/null || true)
  case "${2:-000}" in
    000) status="HTTP 000 (no answer within ${answer_seconds}s)" ;;
    *) status="HTTP $2" ;;
  esac
  say "FAILED: the model did not ${1}: ${status}: ${body}. See: kubectl -n ${POD_NAMESPACE} logs deploy/${deployment}" >&2
  exit 1
}
# ask_model: the VM's two questions (scripts/remote/wait_ready.py `ask_model`, the bodies from
# `question_bodies`): a chat whose `content` holds a word and no special-token markup (a broken
# build answers garbage: tpu-inference #3406), then, with a tool-call parser, a call of
# get_weather whose JSON arguments carry a non-empty city (vLLM's gemma4 parser hands back `{}`
# for a call it could not parse). busybox has no JSON parser: the checks read vLLM's JSON with
# grep, tolerant of the space after ':' (Starlette writes none, json.dumps one).
ask_model() {
  code=$(ask chat "$CHAT_BODY")
  [ "$code" = 200 ] || no_answer "answer 'Say hi in five words.'" "$code" chat
  if ! grep -Eq '"content": ?"[^"]*[A-Za-z][A-Za-z]' "$scratch/chat.json" \
    || grep -Eq '<pad>|<unused[0-9]+>|<\|[^>]*>|<[a-z_]*_of_turn>|<bos>|<eos>' "$scratch/chat.json"; then
    no_answer "answer 'Say hi in five words.' with words (empty content, or markup)" "$code" chat
  fi
  say "the model answered the chat"
  if [ -z "$TOOL_BODY" ]; then
    say "tool call not asked: the server has no --tool-call-parser"
  else
    code=$(ask tool "$TOOL_BODY")
    [ "$code" = 200 ] || no_answer "call get_weather" "$code" tool
    grep -Eq '"name": ?"get_weather"' "$scratch/tool.json" \
      || no_answer "call get_weather (no tool call of it)" "$code" tool
    grep -Eq '"arguments": ?"\{ *\\"city\\": ?\\"[^\\"]' "$scratch/tool.json" \
      || no_answer "call get_weather with JSON arguments holding a city" "$code" tool
    say "the model called get_weather with a city"
  fi
  say "ready: /health 200, /v1/models lists ${MODEL}, and the model answered"
}
say "waiting for the rollout of deployment/${deployment}, then for a Ready replica of ${MODEL} behind ${url} (a new flex-start node is found first)"
while :; do
  now=$(date +%s)
  if [ "$((now - start))" -ge "$deadline" ]; then
    if [ -z "$rolled_out" ]; then
      say "deployment/${deployment} did not roll out generation ${want:-?} within ${deadline}s (last: ${last:-no answer}). Old replicas, if any, keep serving; a new pod whose model does not answer stays unready (its startup probe says why) and keeps its TPU node. See: kubectl -n ${POD_NAMESPACE} rollout status deploy/${deployment}; kubectl -n ${POD_NAMESPACE} get pods,events; docs/gke.md \"Updates\" to go back" >&2
    else
      say "no replica answered /v1/models within ${deadline}s (last: ${last:-no answer}). See: kubectl -n ${POD_NAMESPACE} get pods,events; kubectl -n ${POD_NAMESPACE} logs deploy/${deployment}" >&2
    fi
    exit 1
  fi
  if [ -z "$rolled_out" ]; then
    if rollout_done; then
      rolled_out=1
    else
      sleep "$poll"
      continue
    fi
  fi
  if curl --silent --show-error --fail --max-time 10 --output /dev/null "${url}/health" 2>/dev/null; then
    code=$({ printf 'Authorization: Bearer '; cat "$key_file"; } \
      | curl --silent --max-time 30 --header @- --output "$scratch/models.json" \
        --write-out '%{http_code}' "${url}/v1/models") || code=000
    case "$code" in
      200)
        refused_since=""
        if grep -qF "\"${MODEL}\"" "$scratch/models.json"; then
          say "/health 200 and /v1/models lists ${MODEL}; asking the model"
          ask_model
          exit 0
        fi
        note "/v1/models answered without ${MODEL}"
        ;;
      401 | 403)
        refused "/v1/models answered HTTP ${code}: the API key is the likely cause (the pods serve with another key than the Job's ${key_file}: a wrong or rotated key; a 403 may also come from a proxy or mesh policy in front of the pods)" \
          "Clients with the stack's api_key are refused too. Fix: restart the pods so they read the current key (kubectl -n ${POD_NAMESPACE} rollout restart deploy/vllm), then run pulumi up again"
        ;;
      *)
        refused_since=""
        note "/health 200 but /v1/models answered HTTP ${code} (000: no answer); is the API key the one the pods mounted?"
        ;;
    esac
  else
    refused_since=""
    note "no Ready replica yet"
  fi
  sleep "$poll"
done
