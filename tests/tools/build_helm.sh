#!/usr/bin/env bash
# Build helm from the Go module proxy (no registry ships a helm binary we may fetch).
#
# The binary goes to a cache outside the repo, keyed by the pinned version:
#   ${PODIUM_CACHE:-$HOME/.cache/podium}/helm-<version>/helm
# A build is skipped when the binary is there. Progress goes to stderr; the last line on stdout
# is the path of the binary (tests/test_chart.py reads it).
#
# helm.sh/helm/v3 has no replace directives, so a plain `go install module@version` builds it;
# no wrapper module is needed (unlike k8s.io/kubernetes, FACTS §9).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"

log() { printf '[build_helm] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

out="${PODIUM_CACHE:-$HOME/.cache/podium}/helm-${HELM_VERSION}"
binary="$out/helm"
mkdir -p "$out"
# One builder at a time; others wait and then find the cache filled.
exec 9>"$out/.lock"
flock 9

if [[ -x "$binary" ]]; then
    log "cached: $binary"
    printf '%s\n' "$binary"
    exit 0
fi

log "building helm $HELM_VERSION (a few minutes cold on 2 cores)"
start=$SECONDS
staging="$(mktemp -d "$out/bin.tmp.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
# -p=2: the machine is shared; CGO off: a static binary; the -X flags stamp what a release build
# stamps (else `helm version` says only v3.22).
GOFLAGS="${GOFLAGS:--p=2}" CGO_ENABLED=0 GOBIN="$staging" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
mv "$staging/helm" "$binary"
log "built in $((SECONDS - start)) s: $("$binary" version --short 2>/dev/null || echo '?')"
printf '%s\n' "$binary"
