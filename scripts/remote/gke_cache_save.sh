# Runs as a sidecar of the GKE server pod, in the serving image: the VM path's post-ready step.
# Once this pod's server answers /health (after `Application startup complete.`), it runs
# scripts/remote/xla_cache.py `watch`: a save of what is new in the compile cache (the same
# prefix and generation the init container recorded in CACHE_WORK), again every
# CACHE_SAVE_EVERY seconds (`cache.saveInterval`) for the compiles requests bring, and a last
# one, bounded by CACHE_STOP_TIMEOUT, when the pod is deleted (node recycling, an update, a
# scale-in): the kubelet sends SIGTERM to the server and this sidecar at once and SIGKILLs
# what still runs at the end of the pod's grace period. A sidecar that exits is restarted, so
# this script idles if the watcher ends. Rendered by components/gke/cache_manifests.py; values
# come from the container's env.
#
# Signals: bash is this container's PID 1, and PID 1 receives only the signals it has a handler
# for (kill(2), pid_namespaces(7)), so without the trap below a pod deletion would wait out its
# whole grace period. Bash runs a trap only after the foreground command ends, so every step runs
# as a background child that `wait` waits for: a trapped signal interrupts `wait` at once. On
# SIGTERM the watcher gets it too and makes its last save; before the server was ready, the
# trap saves what the start compiled so far itself (each entry is a whole program; LATEST is
# left alone). A save cut short leaves LATEST and the manifest as they were.
child=""
phase="waiting"
stop() {
  if [ "$phase" = "watching" ] && [ -n "$child" ]; then
    echo "xla-cache-save: SIGTERM; the watcher saves one last time (up to ${CACHE_STOP_TIMEOUT}s)" >&2
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  elif [ "$phase" = "waiting" ]; then
    echo "xla-cache-save: SIGTERM before the server was ready; saving what it compiled so far" >&2
    if [ -n "$child" ]; then
      kill "$child" 2>/dev/null || true
    fi
    python3 "$TOOLS/xla_cache.py" save \
      --work "$CACHE_WORK" \
      --keep-latest \
      --no-touch \
      --timeout "$CACHE_STOP_TIMEOUT" || true
  elif [ -n "$child" ]; then
    kill "$child" 2>/dev/null || true
  fi
  echo "xla-cache-save: SIGTERM; exiting" >&2
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
echo "xla-cache-save: the server is ready; saving new compile-cache entries, then every ${CACHE_SAVE_EVERY}s and on SIGTERM" >&2
phase="watching"
run python3 "$TOOLS/xla_cache.py" watch \
  --work "$CACHE_WORK" \
  --every "$CACHE_SAVE_EVERY" \
  --stop-timeout "$CACHE_STOP_TIMEOUT" \
  || echo "xla-cache-save: the watcher failed; the next start compiles what is missing" >&2
phase="idle"
while true; do
  run sleep 3600
done
