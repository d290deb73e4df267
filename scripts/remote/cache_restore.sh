# Restore the XLA compile cache (components/compile_cache.py) while the image is pulled, so a
# fresh node skips most of its ~685 s of compilation (seed 000). Rendered into start_server.sh by
# components/vm/node_scripts.py. The tool logs every problem to stderr and exits 0: a failed,
# partial or slow restore (bounded by --timeout) means a cold start, never a failed one.
# The key (a hash of the chip, TP size and shape-changing flags) is part of this prefix; the
# generation is the pinned image's digest (@IMAGE@ is NAME@sha256:..., components/image_pin.py),
# so the restore needs nothing from the pull and runs beside it from start to end.
cache_prefix=@PREFIX@
mkdir -p @WORK@
@TOOL_FILES@
# `docker run` would pull a missing image anyway; pulling here lets the restore run alongside it.
image_pull=""
if ! sudo docker image inspect @IMAGE@ >/dev/null 2>&1; then
  sudo docker pull @IMAGE@ >&2 &
  image_pull=$!
fi
python3 @TOOL@ fetch \
  --work @WORK@ \
  --prefix "$cache_prefix" \
  --timeout @TIMEOUT@ \
  --image @IMAGE@ || true
# The server runs as root (tpu-inference's image has no USER) and JAX creates the cache directory
# itself (jax/_src/lru_cache.py), so after one start on this VM the directory is root's and the
# install, running as this user, could not write to it: hand it back first. The container, being
# root, reads and writes it either way.
if ! { sudo mkdir -p @DIR@ && sudo chown -R "$(id -u):$(id -g)" @DIR@; }; then
  echo "start-server: could not take over the compile cache directory with sudo" >&2
fi
python3 @TOOL@ install \
  --work @WORK@ \
  --prefix "$cache_prefix" \
  --timeout @TIMEOUT@ \
  --dir @DIR@ \
  --image @IMAGE@ || echo "start-server: the compile cache was not restored; starting cold" >&2
if [ -n "$image_pull" ] && ! wait "$image_pull"; then
  echo "start-server: docker pull failed; docker run retries and reports it" >&2
fi
