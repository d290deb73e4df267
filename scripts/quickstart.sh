#!/usr/bin/env bash
# The main job on a fresh machine (README's first command): a state backend, the stack, then
# `pulumi up` (which shows its preview and asks before it creates anything).
#
#   scripts/quickstart.sh [STACK] [--preview]      STACK defaults to v5e1
#
# The Pulumi CLI: the one on PATH (your install: it has its language hosts and fetches the
# providers it lacks), else the one scripts/engine/build.sh built from the Go module proxy, when
# that build has the Python language host this program needs. It says which one it uses.
# Without either it still does the offline part: the full plan of the stack from
# scripts/plan.py (the program under mocks: no cloud, no credentials), and how to install the
# CLI for the real run. State backend: the one you are logged in to, or PULUMI_BACKEND_URL;
# else a local one inside the project (file://$PWD/.pulumi-state, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

STACK="${1:-v5e1}"
ACTION=up
if [ "${2:-}" = "--preview" ]; then
  ACTION=preview
elif [ -n "${2:-}" ]; then
  echo "quickstart: unknown option ${2}. Usage: scripts/quickstart.sh [STACK] [--preview]" >&2
  exit 2
fi
if [ ! -f "Pulumi.$STACK.yaml" ]; then
  stacks=$(ls Pulumi.*.yaml | sed -e 's/^Pulumi\.//' -e 's/\.yaml$//' | tr '\n' ' ')
  echo "quickstart: no stack file Pulumi.$STACK.yaml. Stacks: $stacks" >&2
  exit 2
fi

# Backend gke: the Kubernetes provider's kubeconfig authenticates with gke-gcloud-auth-plugin
# (docs/gke.md, "Prerequisites"), which the real run needs on PATH.
GKE_PLUGIN_HINT=""
if grep -Eq '^[[:space:]]*tpu-vllm:backend:[[:space:]]*gke[[:space:]]*$' "Pulumi.$STACK.yaml"; then
  GKE_PLUGIN_HINT="gcloud components install gke-gcloud-auth-plugin (backend gke: kubectl access);"
fi

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "quickstart: creating the virtualenv $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
fi

BUILT_NOTE=""
if command -v pulumi >/dev/null; then
  echo "quickstart: using the Pulumi CLI on PATH: $(command -v pulumi)"
elif built_bin="$(scripts/engine/build.sh --print-bin 2>/dev/null)"; then
  if [ -x "$built_bin/pulumi-language-python" ]; then
    PATH="$built_bin:$PATH"
    echo "quickstart: using the Pulumi CLI built by scripts/engine/build.sh: $built_bin/pulumi"
  else
    BUILT_NOTE="The CLI that scripts/engine/build.sh built ($built_bin/pulumi) has no Python
language host (pulumi-language-python; scripts/engine/build.sh --status says why), so it cannot
run this program.
"
  fi
fi

if ! command -v pulumi >/dev/null; then
  "$VENV/bin/python" scripts/plan.py "$STACK"
  cat <<HINT

quickstart: the Pulumi CLI is not installed, so this was the offline part: the plan above is
what \`pulumi up -s $STACK\` would create (made under Pulumi mocks: no cloud, no credentials).
${BUILT_NOTE}For the real run:
  1. install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh
     (other ways: https://www.pulumi.com/docs/install/), then open a new shell;
  2. gcloud auth application-default login; ${GKE_PLUGIN_HINT}
  3. run this again: scripts/quickstart.sh $STACK
HINT
  exit 0
fi
if [ -n "$GKE_PLUGIN_HINT" ] && ! command -v gke-gcloud-auth-plugin >/dev/null; then
  echo "quickstart: Pulumi.$STACK.yaml uses backend gke, whose Kubernetes access needs" \
    "gke-gcloud-auth-plugin on PATH. Fix: gcloud components install gke-gcloud-auth-plugin," \
    "then run this again." >&2
  exit 2
fi

# A state backend. `pulumi whoami` fails when no backend is logged in to.
if [ -z "${PULUMI_BACKEND_URL:-}" ] && ! pulumi whoami >/dev/null 2>&1; then
  state_dir="${TPU_VLLM_STATE_DIR:-$PWD/.pulumi-state}"
  mkdir -p "$state_dir"
  echo "quickstart: no state backend yet: using the local one in $state_dir"
  pulumi login "file://$state_dir"
fi
# Self-managed backends (file://, gs://, s3://) encrypt the stack's secrets with a passphrase.
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}${PULUMI_CONFIG_PASSPHRASE_FILE:-}${PULUMI_ACCESS_TOKEN:-}" ]; then
  echo "quickstart: a self-managed backend asks for a passphrase for this stack's secrets;" \
    "keep it (every later pulumi command needs it), or set PULUMI_CONFIG_PASSPHRASE first."
fi

pulumi stack select --create "$STACK"
if ! pulumi config get gcp:project -s "$STACK" >/dev/null 2>&1; then
  if [ -z "${GOOGLE_CLOUD_PROJECT:-}" ]; then
    echo "quickstart: the stack has no gcp:project. Fix: pulumi config set gcp:project" \
      "YOUR_PROJECT -s $STACK (it is written into Pulumi.$STACK.yaml), or set" \
      "GOOGLE_CLOUD_PROJECT, then run this again." >&2
    exit 2
  fi
  pulumi config set gcp:project "$GOOGLE_CLOUD_PROJECT" -s "$STACK"
fi
exec pulumi "$ACTION" -s "$STACK"
