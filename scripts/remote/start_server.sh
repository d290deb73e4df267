# (Re)start the vLLM container. Rendered by components/vm/node_scripts.py: `set -euo pipefail`
# first, then this, with the `docker run` line one flag per line so a preview diff shows
# exactly which flag changed. Prints only the new container's id on stdout.
@SERVER_PRELUDE@
sudo docker rm -f @CONTAINER@ >/dev/null 2>&1 || true
@DOCKER_RUN@
