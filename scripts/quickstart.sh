#!/usr/bin/env bash
# The main job on a fresh machine (README's first command): a state backend, the stack, then
# `pulumi up` (which shows its preview and asks before it creates anything).
#
#   scripts/quickstart.sh [STACK] [--preview]      STACK defaults to v5e1
#
# The Pulumi CLI: the one on PATH, the one you installed (it has its language hosts and fetches
# the providers it lacks); it says which one it uses. Without it, it still does the offline part:
# the plan of the stack from scripts/plan.py (the program under mocks: no cloud, no
# credentials), in brief on the terminal (the summary, the warnings, the outputs) and in full in
# .pulumi-state/plans/STACK.txt (git-ignored; TPU_VLLM_PLAN_DIR=DIR for another directory), and
# the steps before the real run, the CLI's install last. State backend: the one you are logged in
# to, or PULUMI_BACKEND_URL; else a local one inside the project (file://$PWD/.pulumi-state,
# git-ignored).
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
# Who may connect: the endpoint's clients, and (VM stacks, which the deployer reaches over SSH)
# the deployer's own address. A GKE stack has no SSH and warns if sshCidrs is set.
GKE_PLUGIN_HINT=""
SSH_HINT="
       sshCidrs:
         - YOUR.OWN.ADDRESS/32     # the machine that runs pulumi up (it dials port 22)"
if grep -Eq '^[[:space:]]*tpu-vllm:backend:[[:space:]]*gke[[:space:]]*$' "Pulumi.$STACK.yaml"; then
  GKE_PLUGIN_HINT="
     gcloud components install gke-gcloud-auth-plugin (backend gke: kubectl access)"
  SSH_HINT=""
fi

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "quickstart: creating the virtualenv $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
fi

if ! command -v pulumi >/dev/null; then
  plan_dir="${TPU_VLLM_PLAN_DIR:-$PWD/.pulumi-state/plans}"
  mkdir -p "$plan_dir"
  plan_file="$plan_dir/$STACK.txt"
  "$VENV/bin/python" -m scripts.plan "$STACK" --summary --out "$plan_file"
  cat <<HINT

quickstart: no Pulumi CLI on PATH, so this was the offline part: the plan in brief of what
\`pulumi up -s $STACK\` would create (made under Pulumi mocks: no cloud, no credentials).
The full plan, every resource and its inputs: $plan_file
Before the real run, once (steps 1 and 2 edit Pulumi.$STACK.yaml, no CLI needed; with one,
\`pulumi config set\` writes the same lines: README, "Quickstart"):
  1. gcp:project, one line under \`config:\`:
       gcp:project: YOUR_PROJECT
  2. who may connect, under \`tpu-vllm:access:\` (not the example range 203.0.113.0/24):
       allowedCidrs:
         - YOUR.CLIENTS.RANGE/24   # the endpoint's clients${SSH_HINT}
  3. the Hugging Face token, into Secret Manager (it signs in with step 4's credentials: run
     that first if you never have):
     .venv/bin/python -m scripts.save_hf_token --stack $STACK
  4. gcloud auth application-default login${GKE_PLUGIN_HINT}
  5. install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh
     (other ways: https://www.pulumi.com/docs/install/), then open a new shell
Then run this again: scripts/quickstart.sh $STACK
HINT
  exit 0
fi
echo "quickstart: using the Pulumi CLI on PATH: $(command -v pulumi)"
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
