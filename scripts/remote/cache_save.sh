# Ready: save the compile cache in the background, detached from this SSH session (setsid, no
# inherited descriptors), so neither the readiness line nor `pulumi up` waits for the upload;
# then again every @EVERY@ s (`cache.saveInterval`), for the compiles requests bring later, and
# once more when this container stops (`docker wait`: a `docker stop`, the next start's
# `docker rm -f`, a crash) or the watcher gets SIGTERM (scripts/remote/xla_cache_watch.py).
# Its log is ~/.tpu-vllm/xla-cache/save.log. Rendered by components/vm/node_scripts.py.
if [ -f @TOOL@ ]; then
  setsid nohup python3 @TOOL@ watch \
    --work @WORK@ \
    --container @CONTAINER@ \
    --every @EVERY@ </dev/null >>@WORK@/save.log 2>&1 &
  echo "compile cache: saving new entries in the background, again every @EVERY@s and when the server stops (log: @WORK@/save.log)" >&2
fi
