# The compile cache is off (tpu-vllm:cache.enabled false): record that for the readiness result,
# and leave nothing for the save step to do. Rendered by components/vm/node_scripts.py.
mkdir -p @WORK@
@TOOL_FILES@
python3 @TOOL@ off --work @WORK@ || true
