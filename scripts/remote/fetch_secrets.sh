# Fetch the node's secrets into ~/.tpu-vllm/secrets (mode 0600) with the VM's own identity.
# Rendered by components/vm/secrets_fetch.py: `set -euo pipefail` first, the `fetch` lines last.
#
# Seed 000 piped the HF token through ssh and then into an `-e HF_TOKEN` variable, where `ps`
# and `docker inspect` show it. Here the VM reads each secret itself, with gcloud when the
# image has it, else with curl (a metadata-server token, then the Secret Manager REST API).
# A secret only ever travels down a pipe into its file: never a shell variable, an argument or
# a log line. The access token does the same (curl reads its header from stdin).
# TPU_VLLM_SECRETS_VIA=gcloud|curl forces one way; GCE_METADATA_HOST and
# SECRET_MANAGER_API_ENDPOINT override the endpoints (Private Service Connect, tests).
umask 077
mkdir -p ~/.tpu-vllm/secrets
chmod 700 ~/.tpu-vllm ~/.tpu-vllm/secrets
deadline_seconds=@DEADLINE@
via=${TPU_VLLM_SECRETS_VIA:-auto}
if [ "$via" = auto ]; then
  if command -v gcloud >/dev/null 2>&1; then via=gcloud; else via=curl; fi
fi

# read_secret_VIA PROJECT SECRET VERSION: the secret's bytes on stdout.
read_secret_gcloud() {
  gcloud secrets versions access "$3" \
    --secret="$2" \
    --project="$1" \
    --quiet
}

read_secret_curl() {
  curl --silent --show-error --fail --max-time 30 \
    --header 'Metadata-Flavor: Google' \
    "http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/service-accounts/default/token" \
    | python3 -c 'import json, sys; print("Authorization: Bearer " + json.load(sys.stdin)["access_token"])' \
    | curl --silent --show-error --fail --max-time 30 \
      --header @- \
      "${SECRET_MANAGER_API_ENDPOINT:-https://secretmanager.googleapis.com}/v1/projects/$1/secrets/$2/versions/$3:access" \
    | python3 -c 'import base64, json, sys; sys.stdout.buffer.write(base64.b64decode(json.load(sys.stdin)["payload"]["data"]))'
}

# fetch NAME PROJECT SECRET VERSION: retry while a fresh IAM grant reaches Secret Manager.
fetch() {
  local dest=~/.tpu-vllm/secrets/$1 waited=0 delay=2
  until "read_secret_$via" "$2" "$3" "$4" > "$dest.tmp"; do
    if [ "$waited" -ge "$deadline_seconds" ]; then
      rm -f "$dest.tmp"
      echo "fetch-secrets: cannot read projects/$2/secrets/$3/versions/$4 (via $via) after ${waited}s." \
        "The node's service account needs roles/secretmanager.secretAccessor on it," \
        "and the secret needs an enabled version." >&2
      exit 1
    fi
    echo "fetch-secrets: $3 is not readable yet (access may still be propagating); retrying in ${delay}s" >&2
    sleep "$delay"
    waited=$((waited + delay))
    delay=$((delay < 16 ? delay * 2 : 30))
  done
  if [ ! -s "$dest.tmp" ]; then
    rm -f "$dest.tmp"
    echo "fetch-secrets: projects/$2/secrets/$3/versions/$4 is empty" >&2
    exit 1
  fi
  chmod 600 "$dest.tmp"
  mv -f "$dest.tmp" "$dest"
  echo "fetch-secrets: $1 <- projects/$2/secrets/$3/versions/$4 via $via (mode 0600)" >&2
}

@FETCHES@
