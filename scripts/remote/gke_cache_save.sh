# Runs as a sidecar of the GKE server pod, in the serving image: the VM path's post-ready step.
# Once this pod's server answers /health (after `Application startup complete.`), save what is
# new in the compile cache (scripts/remote/xla_cache.py `save`, the same prefix and generation
# the init container recorded in CACHE_WORK), then idle: a sidecar that exits is restarted.
# Rendered by components/gke/cache_manifests.py; values come from the container's env.
#
# Signals: bash is this container's PID 1, and PID 1 receives only the signals it has a handler
# for (kill(2), pid_namespaces(7)), so without the trap below a pod deletion would wait out its
# whole grace period. Bash runs a trap only after the foreground command ends, so every step runs
# as a background child that `wait` waits for: a trapped signal interrupts `wait` at once. On
# SIGTERM the sidecar stops the running step and exits, with no final save: the server gets the
# same SIGTERM (its cache may be mid-write), the grace period is short, and the save after ready
# has already stored the startup's compilations, which is what a cold start pays for. A save cut
# short leaves LATEST on the last complete generation (it is written last).
child=""
stop() {
  echo "xla-cache-save: SIGTERM; exiting${child:+ (stopping the running step)}" >&2
  if [ -n "$child" ]; then
    kill "$child" 2>/dev/null || true
  fi
  exit 0
}
trap stop TERM INT
run() {
  "$@" &
  child=$!
  wait "$child"
  local status=$?
  child=""
  return "$status"
}
until run python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
  "http://127.0.0.1:${SERVER_PORT}/health" >/dev/null 2>&1; do
  run sleep 15
done
echo "xla-cache-save: the server is ready; saving new compile-cache entries" >&2
run python3 "$TOOLS/xla_cache.py" save --work "$CACHE_WORK" \
  || echo "xla-cache-save: the save failed; the next start compiles what is missing" >&2
while true; do
  run sleep 3600
done
