# Runs as the GKE server pod's init container, in the serving image (it has python3): the VM
# path's restore (scripts/remote/xla_cache.py `fetch`, then `install`) into the emptyDir the
# server mounts as ~/.cache/vllm, under the same key and prefix. The generation is the digest the
# kubelet pulled (scripts/remote/pod_image.py, which waits, bounded, until the kubelet has
# published it) where the VM asks docker; `--in-pod` keeps the tool from ever calling docker,
# which a pod does not have, and has the token fetch (the fetch's comes in the pod's first
# seconds) also retry the 403/404 of a GKE metadata server that is still starting. The fetch of
# the newest generation runs while pod_image.py waits.
# Never fails the pod: a failed, partial or slow restore (bounded by CACHE_TIMEOUT) means a cold
# start, and the reason is logged. Rendered by components/k8s_manifests.py; values come from the
# container's env.
python3 "$TOOLS/xla_cache.py" fetch \
  --work "$CACHE_WORK" \
  --prefix "$CACHE_PREFIX" \
  --timeout "$CACHE_TIMEOUT" \
  --in-pod &
cache_fetch=$!
image=$(python3 "$TOOLS/pod_image.py" || true)
wait "$cache_fetch" || true
python3 "$TOOLS/xla_cache.py" install \
  --work "$CACHE_WORK" \
  --prefix "$CACHE_PREFIX" \
  --timeout "$CACHE_TIMEOUT" \
  --dir "$CACHE_DIR" \
  --in-pod \
  --image "${image:-$SERVER_IMAGE}" || echo "xla-cache-restore: not restored; starting cold" >&2
