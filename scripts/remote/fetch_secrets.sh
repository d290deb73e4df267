# Fetch the node's secrets into ~/.tpu-vllm/secrets (0600) with the VM's own identity.
# Rendered by components/remote_scripts.py (`set -euo pipefail` first, one quoted argument
# per line); the Python program runs from a quoted here-document, so nothing in it is expanded
# by the shell.
umask 077
mkdir -p ~/.tpu-vllm/secrets
chmod 700 ~/.tpu-vllm ~/.tpu-vllm/secrets
python3 - \
@FETCH_ARGS@ <<'TPU_VLLM_FETCH_SECRETS'
@FETCH_SECRETS_PY@
TPU_VLLM_FETCH_SECRETS
