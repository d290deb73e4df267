# Runs as a sidecar of the GKE server pod, in the serving image: the VM path's post-ready step.
# Once this pod's server answers /health (after `Application startup complete.`), save what is
# new in the compile cache (scripts/remote/xla_cache.py `save`, the same prefix and generation
# the init container recorded in CACHE_WORK), then idle: a sidecar that exits is restarted.
# Rendered by components/k8s_manifests.py; values come from the container's env.
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
  "http://127.0.0.1:${SERVER_PORT}/health" >/dev/null 2>&1; do
  sleep 15
done
echo "xla-cache-save: the server is ready; saving new compile-cache entries" >&2
python3 "$TOOLS/xla_cache.py" save --work "$CACHE_WORK" \
  || echo "xla-cache-save: the save failed; the next start compiles what is missing" >&2
exec sleep infinity
