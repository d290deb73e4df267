#!/usr/bin/env bash
# Builds the Kubernetes control plane the GKE stack is tested against from the Go module proxy,
# once per set of versions, into a cache outside the clone; prints the bin directory on its last
# line (docs/testing.md, "The Kubernetes layer"). It sits beside scripts/engine/build.sh and
# follows its rules: pinned wrapper modules (go.mod, go.sum committed), a cache keyed by the
# versions and a hash of every input, a build in a temporary directory renamed into place under a
# lock, and Go's own caches (GOMODCACHE, GOCACHE) left to the user.
#
#   scripts/kube/build.sh              build (or reuse) the tools; last stdout line: the bin dir
#   scripts/kube/build.sh --print-bin  print the bin dir of a finished build, or exit 1
#   scripts/kube/build.sh --where      print the cache dir these inputs build into, built or not
#
# The tools (kubectl is left out: the tests talk to the API server themselves):
#   etcd                     go.etcd.io/etcd/server/v3 $ETCD_VERSION, wrapper etcd/ (main.go is
#                            the root module's main.go call: that module replaces its own parts
#                            with directories of its tree, so it cannot be required)
#   kube-apiserver           k8s.io/kubernetes $KUBERNETES_VERSION, wrapper kubernetes/ (every
#   kube-controller-manager  staging module replaced by its published v0.x twin)
#   kube-scheduler
#   kwok                     sigs.k8s.io/kwok $KWOK_VERSION cmd/kwok, wrapper kwok/
#   pulumi-resource-kubernetes
#                            github.com/pulumi/pulumi-kubernetes/provider/v4 $PROVIDER_VERSION,
#                            wrapper pulumi-kubernetes/: its go:generate step (generate.go) first,
#                            then its cmd/pulumi-resource-kubernetes built beside the output
set -euo pipefail
# One function, read before it runs: editing this file mid-build cannot change the running build.
main() {
  HERE="$(cd "$(dirname "$0")" && pwd)"

  # --- Pins (also in the wrapper go.mod files). ---
  KUBERNETES_VERSION=v1.34.4
  ETCD_VERSION=v3.6.4
  KWOK_VERSION=v0.8.0
  PROVIDER_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
  PROVIDER_VERSION=v4.0.0-20260115033456-f47bc2d6f199
  # The version the provider reports and writes into its schema: its release build sets
  # pkg/version.Version and generate.go's VERSION to the tag; this commit has none the proxy
  # names, so the pseudo-version's semver stands in.
  PROVIDER_SEMVER="${PROVIDER_VERSION#v}"

  # Release-style flags as in scripts/engine/build.sh; kube's own builds are also static
  # (hack/lib/golang.sh: CGO_ENABLED=0 for the server binaries).
  GO_BUILD_FLAGS=(-trimpath -buildvcs=false)
  export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local

  log() { echo "kube-build: $*" >&2; }

  MODE=build
  case "${1:-}" in
    "") ;;
    --print-bin) MODE=print-bin ;;
    --where) MODE=where ;;
    *)
      echo "kube-build: unknown option ${1}. Usage: scripts/kube/build.sh [--print-bin|--where]" >&2
      exit 2
      ;;
  esac

  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"
  fi
  if ! command -v go >/dev/null; then
    echo "kube-build: the go command is not on PATH; these tools are built with Go >= 1.26.7." \
      "Fix: install Go 1.26.7 (https://go.dev/doc/install), then run this again." >&2
    exit 3
  fi

  # hack/lib/version.sh's ldflags, so the server reports its own version (/version).
  KUBE_LDFLAGS="-w -s -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  KUBE_LDFLAGS+=" -X k8s.io/component-base/version.gitMajor=1"
  KUBE_LDFLAGS+=" -X k8s.io/component-base/version.gitMinor=34"
  KUBE_LDFLAGS+=" -X k8s.io/component-base/version.gitTreeState=clean"
  PROVIDER_LDFLAGS="-w -s -X $PROVIDER_MODULE/pkg/version.Version=$PROVIDER_SEMVER"

  ROOT="${TPU_VLLM_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-vllm/kube}"
  WRAPPERS=(kubernetes etcd kwok pulumi-kubernetes)
  inputs_hash() {
    {
      for w in "${WRAPPERS[@]}"; do cat "$HERE/$w/go.mod" "$HERE/$w/go.sum"; done
      cat "$HERE/etcd/main.go"
      printf '%s\n' "${GO_BUILD_FLAGS[*]}" "CGO_ENABLED=$CGO_ENABLED" "$KUBE_LDFLAGS" "$PROVIDER_LDFLAGS"
      go env GOVERSION GOOS GOARCH
    } | sha256sum | cut -c1-12
  }
  KEY="kubernetes-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$(inputs_hash)"
  DEST="$ROOT/$KEY"
  TOOLS_FILE="$DEST/tools.tsv"

  case "$MODE" in
    where)
      echo "$DEST"
      exit 0
      ;;
    print-bin)
      [ -f "$TOOLS_FILE" ] || { echo "kube-build: not built yet: run scripts/kube/build.sh" >&2; exit 1; }
      echo "$DEST/bin"
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
  mkdir -p "$WORK/bin" "$WORK/generate"
  started=$SECONDS
  : >"$WORK/tools.tsv"
  record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/tools.tsv"; }

  # go build is silent while it works: a progress line each minute (see scripts/engine/build.sh).
  (
    exec 9>&-
    t0=$(date +%s)
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 60 &
      nap=$!
      wait "$nap"
      log "still building ($(($(date +%s) - t0)) s)"
    done
  ) &
  ticker=$!
  trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$WORK"' EXIT

  build() { # build WRAPPER OUTPUT PACKAGE [go build flags...]
    local wrapper="$1" out="$2" pkg="$3"
    shift 3
    (cd "$HERE/$wrapper" && go build "${GO_BUILD_FLAGS[@]}" "$@" -o "$WORK/bin/$out" "$pkg")
    log "$out: built ($((SECONDS - started)) s since the start)"
  }

  log "etcd $ETCD_VERSION (cold: downloads and compiles; the whole set takes about 20 min on" \
    "2 cores: docs/testing.md)"
  build etcd etcd . -ldflags "-w -s"
  record etcd "$ETCD_VERSION" built

  log "kube-apiserver, kube-controller-manager, kube-scheduler $KUBERNETES_VERSION"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
    build kubernetes "$cmd" "k8s.io/kubernetes/cmd/$cmd" -ldflags "$KUBE_LDFLAGS"
    record "$cmd" "$KUBERNETES_VERSION" built
  done

  log "kwok $KWOK_VERSION"
  build kwok kwok sigs.k8s.io/kwok/cmd/kwok -ldflags "-w -s"
  record kwok "$KWOK_VERSION" built

  log "pulumi-resource-kubernetes $PROVIDER_VERSION: its generate.go, then the build"
  provider_dir="$(cd "$HERE/pulumi-kubernetes" && go mod download -json "$PROVIDER_MODULE@$PROVIDER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  cmd_dir="$provider_dir/cmd/pulumi-resource-kubernetes"
  # generate.go reads and writes its working directory, which in the module cache is read-only,
  # and Go refuses an -overlay of files there: the command's directory (main.go, generate.go and
  # the two JSON sources) is built in a scratch directory with this wrapper's module graph
  # (-modfile; a go.mod must exist there to mark the root, and is not read). The files stay the
  # module's own, go.sum-checked; only the two generated ones are new.
  gen="$WORK/generate"
  install -m 0644 "$cmd_dir/main.go" "$cmd_dir/generate.go" "$cmd_dir/schema.json" \
    "$cmd_dir/terraform-mapping.json" "$gen/"
  printf 'module generate\n' >"$gen/go.mod"
  (cd "$gen" && VERSION="$PROVIDER_SEMVER" go run -modfile="$HERE/pulumi-kubernetes/go.mod" generate.go)
  (cd "$gen" && go build "${GO_BUILD_FLAGS[@]}" -modfile="$HERE/pulumi-kubernetes/go.mod" \
    -ldflags "$PROVIDER_LDFLAGS" \
    -o "$WORK/bin/pulumi-resource-kubernetes" .)
  log "pulumi-resource-kubernetes: built ($((SECONDS - started)) s since the start)"
  record pulumi-resource-kubernetes "$PROVIDER_VERSION" built
  rm -rf "$gen"

  kill "$ticker" 2>/dev/null || true
  rm -rf "$DEST"
  mv -T "$WORK" "$DEST"
  trap - EXIT
  log "done in $((SECONDS - started)) s: $DEST"
  echo "$DEST/bin"
}

main "$@"
