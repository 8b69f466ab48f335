#!/usr/bin/env bash
# Build a verdict oracle: Cilium's own policy engine (github.com/cilium/cilium pkg/policy) in a
# small command, from the Go module proxy. See docs/cilium.md.
#
#   build.sh [oracle|oracle115]     (default: oracle, the current Cilium)
#
# The binary goes to a cache outside the repo, keyed by the pinned Cilium version and the recipe:
#   ${PODIUM_CACHE:-$HOME/.cache/podium}/cilium-oracle/<cilium version>-<recipe>/oracle
# A build is skipped when the binary is already there. Progress goes to stderr; the last line on
# stdout is the binary. The compiler runs under `nice -n 10`, so tests running beside a build
# keep a core.
#
# The Cilium version is pinned by the go.mod/go.sum of the module directory: change it there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="${1:-oracle}"

log() { printf '[cilium/build %s] %s\n' "$module" "$*" >&2; }

case "$module" in
    oracle | oracle115) ;;
    *) log "unknown module (want oracle or oracle115)"; exit 2 ;;
esac
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

dir="$here/$module"
version="$(cd "$dir" && go list -m -f '{{.Version}}' github.com/cilium/cilium)"
if [[ -z "$version" ]]; then
    log "cannot read the version of github.com/cilium/cilium from $module/go.mod"
    exit 1
fi

cache_root="${PODIUM_CACHE:-$HOME/.cache/podium}/cilium-oracle"
# The recipe (this script and the module's files) is part of the key too, so a change to it
# rebuilds instead of reusing a binary built differently.
recipe="$(cd "$here" && cat build.sh "$module/go.mod" "$module/go.sum" "$module/main.go" \
    | sha256sum | cut -c1-8)"
out="$cache_root/$version-$recipe"
binary="$out/oracle"

mkdir -p "$out"
# One builder at a time per key; others wait and then find the cache filled.
exec 9>"$out/.lock"
flock 9

if [[ -x "$binary" ]]; then
    log "cached: $binary"
    printf '%s\n' "$binary"
    exit 0
fi

export GOFLAGS="${GOFLAGS:--p=2}"
export CGO_ENABLED=0

staging="$(mktemp -d "$out/tmp.XXXXXX")"
trap 'rm -rf "$staging"' EXIT

started=$SECONDS
log "building cilium $version into $binary"
(cd "$dir" && nice -n 10 go build -trimpath -ldflags='-s -w' -o "$staging/oracle" .)
[[ -x "$staging/oracle" ]] || { log "no binary in $staging"; exit 1; }
mv "$staging/oracle" "$binary"
log "built in $((SECONDS - started))s: $binary"
printf '%s\n' "$binary"
