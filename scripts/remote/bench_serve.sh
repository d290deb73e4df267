# One `vllm bench serve` run on the node, inside the serving image, against the local server.
# Rendered by scripts/bench.py: `set -euo pipefail` first, then this, with every value quoted
# by shlex.quote and the `docker run` line one flag per line. Nothing rendered here is a secret:
# the API key stays in its 0600 file, is mounted read-only and read into OPENAI_API_KEY (which
# the benchmark client sends as the bearer token) inside the container, so it is on no command
# line and not in `docker inspect`. The benchmark's progress goes to stderr; stdout carries the
# result JSON only.
for secret in hf_token vllm_api_key; do
  if [ ! -s ~/.tpu-vllm/secrets/"$secret" ]; then
    echo "bench-serve: ~/.tpu-vllm/secrets/$secret is missing; is the stack up (pulumi up)?" >&2
    exit 1
  fi
done
if ! sudo docker container inspect @CONTAINER@ >/dev/null 2>&1; then
  echo "bench-serve: no container named @CONTAINER@ on this node; run pulumi up first" >&2
  exit 1
fi
# Created by this user before docker can create it as root; results are written by the
# container's root user, so remove an old result of the same name from here.
mkdir -p @HOST_RESULT_DIR@
rm -f @HOST_RESULT_DIR@/@RESULT_FILE@
@DOCKER_RUN@ </dev/null >&2
cat @HOST_RESULT_DIR@/@RESULT_FILE@
