#!/usr/bin/env bash
# Builds the real Pulumi engine from the Go module proxy, once per set of versions, into a cache
# outside the clone; prints the bin directory on its last line (docs/testing.md, "The engine layer").
#
#   scripts/engine/build.sh              build (or reuse) the tools; last stdout line: the bin dir
#   scripts/engine/build.sh --print-bin  print the bin dir of a finished build, or exit 1
#   scripts/engine/build.sh --status     print the tools file (what was built, what was refused)
#   scripts/engine/build.sh --where      print the cache dir these inputs build into, built or not
#
# Cache: ${TPU_VLLM_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-vllm/engine}/KEY, where KEY
# joins the versions below with a hash of the wrapper go.mod/go.sum, the build flags and the Go
# version: a change to any of them builds anew, anything else reuses. A build runs in a temporary
# directory renamed into place at the end, under a lock, so an interrupted or concurrent run never
# leaves or reads a half-built cache. Go's own caches (GOMODCACHE, GOCACHE) are the user's.
#
# The tools, and what this machine's Go module proxy serves of them:
#   pulumi                        package github.com/pulumi/pulumi/pkg/v3/cmd/pulumi, built from the
#                                 wrapper module cli/ (go.mod, go.sum committed): pkg/go.mod replaces
#                                 sdk/v3 with ../sdk, so `go install pkg@version` refuses it.
#   pulumi-language-python-exec   scripts from the sdk/v3 module of the same version (python/cmd,
#   pulumi-resource-pulumi-python python/dist): the language host runs the first; the engine runs
#                                 the second for dynamic providers.
#   pulumi-language-python        module $LANGUAGE_HOST_MODULE (untagged): the proxy lists no
#                                 version of it, and the pseudo-version of the CLI tag's commit
#                                 cannot be formed here (the proxy's answer for the tag names no
#                                 commit). Not built; the refusal is recorded in the tools file.
#   pulumi-resource-command       module $COMMAND_MODULE at the commit of release $COMMAND_RELEASE
#                                 ($COMMAND_VERSION): the proxy refuses it. Not built; recorded.
# This script builds only real tools: for the two the proxy refuses, the test suite runs its own
# stand-ins (tests/support/standins/, docs/testing.md "The two stand-ins"), and a real one wherever
# found.
set -euo pipefail
# The whole script is one function, read before it runs: editing or checking out another version
# of this file while a build runs (minutes) cannot change what the running build does.
main() {
  HERE="$(cd "$(dirname "$0")" && pwd)"

  # --- Pins. Every module version is fixed here and in the committed wrapper go.mod/go.sum. ---
  # The CLI and sdk/v3: requirements.txt pins the Python SDK at 3.272.0, but the proxy serves no
  # pkg/v3 v3.272.0 nor v3.273.0 ("403 Forbidden: This module version is not available"): v3.274.0
  # is the nearest newer tag it serves.
  PULUMI_VERSION=v3.274.0
  LANGUAGE_HOST_MODULE=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
  # pulumi-command 1.2.1 (requirements.txt): tag v1.2.1 is commit 7f3eb6f3b77c, committed
  # 2026-03-03T23:59:22Z; provider/ has no tags of its own and no /vN suffix, so v0.0.0-TIME-HASH.
  # Its release build (.goreleaser.yml) sets provider/pkg/version.Version to the tag.
  COMMAND_MODULE=github.com/pulumi/pulumi-command/provider
  COMMAND_RELEASE=v1.2.1
  COMMAND_VERSION=v0.0.0-20260303235922-7f3eb6f3b77c

  # The OCI registry the image-pinning tests resolve against, and the client that pushes their test
  # image (tests/support/registry.py): wrapper module registry/ (go.mod, go.sum committed) with both
  # as `tool` lines. crane's requirements raise a few of the registry's indirect ones (go.mod says
  # which): both are built from one module graph.
  REGISTRY_VERSION=v3.1.2 # github.com/distribution/distribution/v3/cmd/registry
  CRANE_VERSION=v0.22.1   # github.com/google/go-containerregistry/cmd/crane

  # --- The release builds' flags (pulumi/pulumi .goreleaser.yml and scripts/go-wrapper.sh:
  # CGO_ENABLED=0, -trimpath, tags osusergo and grpcnotrace, ldflags "-w -s -X ...Version=") plus
  # -buildvcs=false and a read-only module graph: the same inputs give the same bytes. ---
  GO_BUILD_FLAGS=(-trimpath -buildvcs=false -tags osusergo,grpcnotrace)
  CLI_LDFLAGS="-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
  export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local

  log() { echo "engine-build: $*" >&2; }

  MODE=build
  case "${1:-}" in
    "") ;;
    --print-bin) MODE=print-bin ;;
    --status) MODE=status ;;
    --where) MODE=where ;;
    *)
      echo "engine-build: unknown option ${1}." \
        "Usage: scripts/engine/build.sh [--print-bin|--status|--where]" >&2
      exit 2
      ;;
  esac

  # Go's own installer puts it in /usr/local/go (https://go.dev/doc/install), which only an
  # interactive shell's profile adds to PATH: a non-interactive run (CI) looks there too.
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"
  fi
  if ! command -v go >/dev/null; then
    echo "engine-build: the go command is not on PATH; the engine is built with Go >= 1.26.7." \
      "Fix: install Go 1.26.7 (https://go.dev/doc/install; distribution packages are older)," \
      "then run this again." >&2
    exit 3
  fi

  ROOT="${TPU_VLLM_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-vllm/engine}"
  inputs_hash() {
    {
      cat "$HERE/cli/go.mod" "$HERE/cli/go.sum" "$HERE/registry/go.mod" "$HERE/registry/go.sum"
      printf '%s\n' "${GO_BUILD_FLAGS[*]}" "$CLI_LDFLAGS" "CGO_ENABLED=$CGO_ENABLED"
      printf '%s\n' "$LANGUAGE_HOST_MODULE" "$COMMAND_MODULE@$COMMAND_VERSION"
      go env GOVERSION GOOS GOARCH
    } | sha256sum | cut -c1-12
  }
  KEY="pulumi-$PULUMI_VERSION-command-$COMMAND_RELEASE-registry-$REGISTRY_VERSION-$(inputs_hash)"
  DEST="$ROOT/$KEY"
  TOOLS_FILE="$DEST/tools.tsv"

  case "$MODE" in
    where)
      echo "$DEST"
      exit 0
      ;;
    print-bin)
      [ -f "$TOOLS_FILE" ] || { echo "engine-build: not built yet: run scripts/engine/build.sh" >&2; exit 1; }
      echo "$DEST/bin"
      exit 0
      ;;
    status)
      [ -f "$TOOLS_FILE" ] || { echo "engine-build: not built yet: run scripts/engine/build.sh" >&2; exit 1; }
      cat "$TOOLS_FILE"
      exit 0
      ;;
  esac

  mkdir -p "$ROOT"
  exec 9>"$ROOT/.lock"
  if ! flock -n 9; then
    log "another build holds $ROOT/.lock; waiting for it"
    flock 9
  fi

  if [ -f "$TOOLS_FILE" ]; then
    log "reusing $DEST (versions and inputs unchanged)"
    echo "$DEST/bin"
    exit 0
  fi

  WORK="$(mktemp -d "$ROOT/.building-$KEY.XXXXXX")"
  chmod 755 "$WORK"
  trap 'rm -rf "$WORK"' EXIT
  mkdir -p "$WORK/bin"
  started=$SECONDS
  # One line per tool: name, version, and "built" or "refused: COMMAND: the proxy's answer".
  : >"$WORK/tools.tsv"
  record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/tools.tsv"; }
  one_line() { tr '\n\t' '  ' | sed -e 's/  */ /g' -e 's/ $//'; }

  log "pulumi $PULUMI_VERSION: downloading modules (cold: a few hundred MB) and compiling" \
    "(cold: 7 min on a new 2-core machine, 31 min on a heavily shared one: docs/testing.md)"
  # go build is silent while it works: a progress line each minute.
  (
    exec 9>&- # the lock stays with this script, not with the ticker's sleep
    t0=$(date +%s)
    # Stopped, it stops its sleep too: a sleep left behind would hold this script's output
    # open, and a reader of that pipe (a CI log) would wait for it.
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 60 &
      nap=$!
      wait "$nap"
      log "pulumi: still building ($(($(date +%s) - t0)) s)"
    done
  ) &
  ticker=$!
  trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  (cd "$HERE/cli" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "$CLI_LDFLAGS" \
    -o "$WORK/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
  kill "$ticker" 2>/dev/null || true
  trap 'rm -rf "$WORK"' EXIT
  record pulumi "$PULUMI_VERSION" built
  log "pulumi $PULUMI_VERSION: built in $((SECONDS - started)) s"

  log "registry $REGISTRY_VERSION and crane $CRANE_VERSION: compiling"
  for tool in github.com/distribution/distribution/v3/cmd/registry \
    github.com/google/go-containerregistry/cmd/crane; do
    (cd "$HERE/registry" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "-w -s" \
      -o "$WORK/bin/$(basename "$tool")" "$tool")
  done
  record registry "$REGISTRY_VERSION" built
  record crane "$CRANE_VERSION" built
  log "registry and crane: built ($((SECONDS - started)) s since the start)"

  # The language host's scripts, from the sdk/v3 module the CLI was built with (go.sum-checked).
  sdk_dir="$(cd "$HERE/cli" && go mod download -json "github.com/pulumi/pulumi/sdk/v3@$PULUMI_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  for script in cmd/pulumi-language-python-exec dist/pulumi-resource-pulumi-python; do
    install -m 0755 "$sdk_dir/python/$script" "$WORK/bin/"
    record "$(basename "$script")" "$PULUMI_VERSION" built
  done

  # Ask the proxy for the two modules it refused when this script was written; record its answer.
  probe() {
    local tool="$1" version="$2"
    shift 2
    local answer
    if answer="$(cd "$WORK" && GOFLAGS=-mod=mod "$@" 2>&1)"; then
      record "$tool" "$version" "served but not pinned yet: add its wrapper module (docs/testing.md)"
    else
      record "$tool" "$version" "refused: $* -> $(printf '%s' "$answer" | one_line)"
    fi
    log "$tool: $(tail -n 1 "$WORK/tools.tsv" | cut -f3)"
  }
  probe pulumi-language-python "pseudo-version of $PULUMI_VERSION's commit" \
    go list -m -versions "$LANGUAGE_HOST_MODULE"
  probe pulumi-resource-command "$COMMAND_VERSION ($COMMAND_RELEASE)" \
    go mod download -json "$COMMAND_MODULE@$COMMAND_VERSION"

  rm -rf "$DEST"
  mv -T "$WORK" "$DEST"
  trap - EXIT
  log "done in $((SECONDS - started)) s: $DEST"
  echo "$DEST/bin"
}

main "$@"
