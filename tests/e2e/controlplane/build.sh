#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kube-scheduler,
# kube-controller-manager, etcd, kwok) from the Go module proxy.
#
# Binaries go to a cache outside the repo, keyed by the pinned versions:
#   ${PODIUM_CACHE:-$HOME/.cache/podium}/controlplane/<k8s>-<etcd>-<kwok>-<recipe>/bin/
# A build is skipped when all binaries are already there. Progress goes to
# stderr; the last line on stdout is the bin dir.
#
# Versions are pinned by the go.mod/go.sum of the three wrapper modules beside
# this script (kubernetes/, etcd/, kwok/): change them there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[controlplane/build] %s\n' "$*" >&2; }

# Version of module $2 as required by the go.mod in directory $1.
required_version() {
    local dir="$1" module="$2" version
    version="$(cd "$here/$dir" && go list -m -f '{{.Version}}' "$module")"
    if [[ -z "$version" ]]; then
        log "cannot read the version of $module from $dir/go.mod"
        exit 1
    fi
    printf '%s' "$version"
}

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

k8s_version="$(required_version kubernetes k8s.io/kubernetes)"
etcd_version="$(required_version etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(required_version kwok sigs.k8s.io/kwok)"

cache_root="${PODIUM_CACHE:-$HOME/.cache/podium}/controlplane"
# The recipe (this script and the module files) is part of the key too, so a change to it
# rebuilds instead of reusing binaries built differently.
recipe="$(cd "$here" && cat build.sh */go.mod */go.sum | sha256sum | cut -c1-8)"
key="${k8s_version}-${etcd_version}-${kwok_version}-${recipe}"
out="$cache_root/$key"
bin="$out/bin"
binaries=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok)
# kwok needs its Stage objects in a config file (kwokctl embeds the defaults;
# the bare controller does not): copy the upstream defaults of the pinned kwok.
stages_file=kwok-stages.yaml

have_all() {
    local b
    for b in "${binaries[@]}"; do
        [[ -x "$1/$b" ]] || return 1
    done
    [[ -s "$1/$stages_file" ]]
}

mkdir -p "$out"
# One builder at a time per key; others wait and then find the cache filled.
exec 9>"$out/.lock"
flock 9

if have_all "$bin"; then
    log "cached: $bin"
    printf '%s\n' "$bin"
    exit 0
fi

export GOFLAGS="${GOFLAGS:--p=2}"
export CGO_ENABLED=0
build_flags=(-trimpath -ldflags=-s\ -w)

# What hack/lib/version.sh stamps into a release build (else /version says v0.0.0-master).
k8s_minor="${k8s_version#v1.}"
k8s_minor="${k8s_minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done

staging="$(mktemp -d "$out/bin.tmp.XXXXXX")"
trap 'rm -rf "$staging"' EXIT

started=$SECONDS
log "building kubernetes $k8s_version, etcd $etcd_version, kwok $kwok_version into $bin"

log "kube-apiserver, kube-scheduler, kube-controller-manager ($k8s_version)"
(cd "$here/kubernetes" && go build -trimpath -ldflags="$k8s_ldflags" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager)

log "etcd ($etcd_version)"
(cd "$here/etcd" && go build "${build_flags[@]}" -o "$staging/etcd" .)

log "kwok ($kwok_version)"
(cd "$here/kwok" && go build "${build_flags[@]}" -o "$staging/kwok" sigs.k8s.io/kwok/cmd/kwok)

log "kwok default stages"
kwok_dir="$(cd "$here/kwok" && go mod download sigs.k8s.io/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for stage in node/fast/node-initialize.yaml \
             node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    printf -- '---\n'
    cat "$kwok_dir/kustomize/stage/$stage"
done > "$staging/$stages_file"

have_all "$staging" || { log "a binary is missing in $staging"; exit 1; }
rm -rf "$bin"
mv "$staging" "$bin"
trap - EXIT
log "built in $((SECONDS - started))s: $bin"
printf '%s\n' "$bin"
