# Ready: save the compile cache in the background, detached from this SSH session (setsid, no
# inherited descriptors), so neither the readiness line nor `pulumi up` waits for the upload.
# Its log is ~/.tpu-vllm/xla-cache/save.log. Rendered by components/remote_scripts.py.
if [ -f @TOOL@ ]; then
  setsid nohup python3 @TOOL@ save --work @WORK@ </dev/null >>@WORK@/save.log 2>&1 &
  echo "compile cache: saving new entries in the background (log: @WORK@/save.log)" >&2
fi
