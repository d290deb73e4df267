#!/bin/sh
# Runs inside the vLLM container, in front of `vllm serve ...`. vLLM reads its API key from
# VLLM_API_KEY; setting it here from the read-only mounted file keeps the key off every
# command line (`ps`) and out of the container's config (`docker inspect` lists only `-e`
# variables). The HF token needs no such step: HF_TOKEN_PATH names its mounted file.
set -eu
VLLM_API_KEY=$(cat /run/secrets/vllm_api_key)
export VLLM_API_KEY
exec "$@"
