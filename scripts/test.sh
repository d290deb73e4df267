#!/usr/bin/env bash
# The test command (README "Tests"; .ci/run calls it too): install what the tests need into the
# project's virtualenv, then run the suite. Works on a plain clone: nothing outside the checkout
# is read (seed 000's facts are kept in tests/support/fixtures/seed_facts/).
#
#   scripts/test.sh [PYTEST ARGS...]     VENV=DIR picks another virtualenv (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "test: creating the virtualenv $VENV"
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check -r requirements-dev.txt

# Programs the tests run for real: an OpenSSH server and client on 127.0.0.1, and the curl the
# node-side scripts call. Named here so a missing one is one clear line, not 40 test errors.
missing=()
for program in sshd ssh ssh-keygen curl; do
  command -v "$program" >/dev/null || [ -x "/usr/sbin/$program" ] || missing+=("$program")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test: missing ${missing[*]}. Fix (Debian/Ubuntu): sudo apt-get install openssh-server openssh-client curl" >&2
  exit 2
fi
# Go builds Prometheus' own PromQL parser for the observability tests (tests/support/promql.py).
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
  echo "test: missing go (Go 1.26.7 or later; it builds tests/support/promql_check). Fix: install it from go.dev/dl or your distribution" >&2
  exit 2
fi

# The engine layer's tools (docs/testing.md, "The engine layer"): the Pulumi CLI built from the Go
# module proxy, once per set of versions, into a cache outside the clone (a cold build takes
# minutes; later runs reuse it at once). When the build fails, the suite still runs: the engine
# tests skip and say why, except in CI (.ci/run), where they fail. (Go itself is checked above.)
status=0
scripts/engine/build.sh >/dev/null || status=$?
if [ "$status" -ne 0 ]; then
  echo "test: scripts/engine/build.sh failed (exit status $status, above): the engine tests skip." >&2
fi
# The Kubernetes layer's tools (docs/testing.md, "The Kubernetes layer"): etcd, the control plane,
# kwok and pulumi-kubernetes' provider, built and cached the same way (cold: about 20 min).
status=0
scripts/kube/build.sh >/dev/null || status=$?
if [ "$status" -ne 0 ]; then
  echo "test: scripts/kube/build.sh failed (exit status $status, above): the kube tests skip." >&2
fi

# In parallel, two workers per core (TPU_VLLM_TEST_WORKERS=N for another count, 0 for none): the
# suite mostly waits (sshd sessions, logs replayed at wall-clock pace, the engine's steps, a
# drain), so workers that wait leave the cores to the others. Each file of tests/engine/ and
# tests/kube/ runs on one worker in order (one stack's steps, one control plane), every other test
# on its own (tests/conftest.py); tests that need a fixed port or user take their own
# (tests/support/fakes/tpu_vm.py). Arguments given here come last: `-n 0` runs serially. The run
# ends with the skipped tests counted by reason, or "skipped tests: none" (tests/conftest.py), so a
# layer that skipped is never silent.
workers="${TPU_VLLM_TEST_WORKERS:-$(($(nproc) * 2))}"
exec "$VENV/bin/python" -m pytest -q -n "$workers" --dist load "$@"
