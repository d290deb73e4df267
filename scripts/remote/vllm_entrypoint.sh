#!/bin/sh
# Runs inside the vLLM container, in front of `vllm serve ...`. vLLM reads its API key from
# VLLM_API_KEY; setting it here from the read-only mounted file keeps the key off every
# command line (`ps`) and out of the container's config (`docker inspect` lists only `-e`
# variables). Without a key the server must not start at all: it would serve /v1 to anyone the
# firewall lets in. The HF token needs no such step: HF_TOKEN_PATH names its mounted file.
set -eu
key_file=${VLLM_API_KEY_FILE:-/run/secrets/vllm_api_key}
if [ ! -f "$key_file" ] || [ ! -s "$key_file" ]; then
  echo "tpu-vllm entrypoint: no API key in $key_file; refusing to serve without one" >&2
  exit 1
fi
VLLM_API_KEY=$(cat "$key_file")
export VLLM_API_KEY
exec "$@"
