# Runs as the GKE server pod's init container, in the serving image (it has python3): the VM
# path's restore (scripts/remote/xla_cache.py `fetch`, then `install`) into the emptyDir the
# server mounts as ~/.cache/vllm, under the same key and prefix. SERVER_IMAGE is the stack's
# pinned `NAME@sha256:...` (components/image_pin.py): its digest names the generation, so the
# fetch goes straight for it. `--in-pod` keeps the tool from ever calling docker, which a pod
# does not have, and has the token fetch (the fetch comes in the pod's first seconds) also retry
# the 403/404 of a GKE metadata server that is still starting.
# Never fails the pod: a failed, partial or slow restore (bounded by CACHE_TIMEOUT) means a cold
# start, and the reason is logged. Rendered by components/gke/cache_manifests.py; values come
# from the container's env.
python3 "$TOOLS/xla_cache.py" fetch \
  --work "$CACHE_WORK" \
  --prefix "$CACHE_PREFIX" \
  --timeout "$CACHE_TIMEOUT" \
  --image "$SERVER_IMAGE" \
  --in-pod || true
python3 "$TOOLS/xla_cache.py" install \
  --work "$CACHE_WORK" \
  --prefix "$CACHE_PREFIX" \
  --timeout "$CACHE_TIMEOUT" \
  --dir "$CACHE_DIR" \
  --in-pod \
  --image "$SERVER_IMAGE" || echo "xla-cache-restore: not restored; starting cold" >&2
