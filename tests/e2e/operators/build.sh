#!/usr/bin/env bash
# Build real training operators from the Go module proxy, one at a time:
#
#   bash tests/e2e/operators/build.sh trainingoperator mpioperator ...   (no name: all)
#
# Each operator is pinned by the go.mod/go.sum of its wrapper module beside this
# script (<name>/). Its binary, and its project's own CRDs, webhook manifests and
# examples copied out of the module cache (so CRD and controller agree), go to
#   ${PODIUM_CACHE:-$HOME/.cache/podium}/operators/<name>-<version>-<recipe>/
#       bin/<binary>  crds/*.yaml  webhooks/...  examples/...  operator.json
# A build is skipped when operator.json is there (written last). Progress goes to
# stderr; stdout gets one line per name, the output dir (the last line is the last
# name's).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
all=(trainingoperator mpioperator jobset trainer lws kuberay volcano)

log() { printf '[operators/build] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

# Per operator: the module whose version names the build, the main package, the
# binary's name, and what to copy from the module's source tree (paths relative to
# it; directories are copied with every *.yaml below them).
recipe() {
    crds=() webhooks=() examples=()
    case "$1" in
    trainingoperator)
        module=github.com/kubeflow/training-operator
        package=$module/cmd/training-operator.v1
        binary=training-operator
        crds=(manifests/base/crds)
        webhooks=(manifests/base/webhook)
        examples=(examples)
        ;;
    mpioperator)
        module=github.com/kubeflow/mpi-operator
        package=$module/cmd/mpi-operator
        binary=mpi-operator
        crds=(manifests/base/kubeflow.org_mpijobs.yaml)
        examples=(examples/v2beta1)
        ;;
    jobset)
        module=sigs.k8s.io/jobset
        package=$module
        binary=jobset-controller-manager
        crds=(config/components/crd/bases)
        webhooks=(config/components/webhook config/components/internalcert)
        examples=(config/samples)
        ;;
    trainer)
        module=github.com/kubeflow/trainer/v2
        package=$module/cmd/trainer-controller-manager
        binary=trainer-controller-manager
        crds=(manifests/base/crds)
        webhooks=(manifests/base/webhook manifests/base/manager)
        examples=(examples manifests/base/runtimes)
        ;;
    lws)
        module=sigs.k8s.io/lws
        package=$module/cmd
        binary=lws-controller-manager
        crds=(config/crd/bases)
        webhooks=(config/webhook config/internalcert config/manager)
        examples=(docs/examples/sample config/samples)
        ;;
    kuberay)
        module=github.com/ray-project/kuberay/ray-operator
        package=$module
        binary=ray-operator
        crds=(config/crd/bases)
        webhooks=(config/webhook)
        examples=(config/samples)
        ;;
    volcano)
        module=volcano.sh/volcano
        package=$module/cmd/controller-manager
        binary=vc-controller-manager
        crds=(config/crd/volcano/bases config/crd/jobflow/bases)
        examples=(example)
        ;;
    *)
        log "unknown operator '$1' (known: ${all[*]})"
        exit 2
        ;;
    esac
}

# Copy the paths (relative to module dir $1) into $2, keeping their relative paths.
copy_tree() {
    local src="$1" dest="$2" path
    shift 2
    mkdir -p "$dest"
    for path in "$@"; do
        if [[ -d "$src/$path" ]]; then
            (cd "$src" && find "$path" -name '*.yaml' -type f -print0 |
                xargs -0 -r cp --parents -t "$dest")
        elif [[ -f "$src/$path" ]]; then
            (cd "$src" && cp --parents -t "$dest" "$path")
        else
            log "$path is not in $src"
            exit 1
        fi
    done
    chmod -R u+w "$dest"  # the module cache is read-only
}

# Copy the CRD files among the paths (relative to module dir $1) flat into $2.
copy_crds() {
    local src="$1" dest="$2" path file
    shift 2
    mkdir -p "$dest"
    for path in "$@"; do
        [[ -e "$src/$path" ]] || { log "$path is not in $src"; exit 1; }
        while IFS= read -r -d '' file; do
            if grep -q '^kind: CustomResourceDefinition' "$file"; then
                cp "$file" "$dest/"
            fi
        done < <(find "$src/$path" -name '*.yaml' -type f -print0)
    done
    chmod -R u+w "$dest"
    compgen -G "$dest/*.yaml" >/dev/null || { log "no CRDs found in $*"; exit 1; }
}

build_one() {
    local name="$1" version recipe_hash out staging started module_dir
    recipe "$name"
    [[ -f "$here/$name/go.mod" ]] || { log "$here/$name/go.mod is missing"; exit 1; }
    version="$(cd "$here/$name" && go list -m -f '{{.Version}}' "$module")"
    [[ -n "$version" ]] || { log "cannot read the version of $module from $name/go.mod"; exit 1; }
    # The recipe (this script and the wrapper module) is part of the key, so a change to
    # either builds anew instead of reusing something built differently.
    recipe_hash="$(cd "$here" && cat build.sh "$name"/go.mod "$name"/go.sum \
        $(find "$name" -name '*.go' | sort) | sha256sum | cut -c1-8)"
    out="$cache_root/$name-$version-$recipe_hash"

    mkdir -p "$out"
    # One builder at a time per key; others wait and then find the cache filled.
    exec 9>"$out/.lock"
    flock 9
    if [[ -s "$out/operator.json" && -x "$out/bin/$binary" ]]; then
        log "cached: $out"
        printf '%s\n' "$out"
        exec 9>&-
        return
    fi

    staging="$(mktemp -d "$out/tmp.XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    started=$SECONDS
    log "$name: building $module $version ($package) into $out"
    (cd "$here/$name" && go build "${build_flags[@]}" -o "$staging/bin/$binary" "$package")

    module_dir="$(cd "$here/$name" && go mod download "$module" && go list -m -f '{{.Dir}}' "$module")"
    [[ -d "$module_dir" ]] || { log "no module dir for $module@$version"; exit 1; }
    copy_crds "$module_dir" "$staging/crds" "${crds[@]}"
    ((${#webhooks[@]} == 0)) || copy_tree "$module_dir" "$staging/webhooks" "${webhooks[@]}"
    ((${#examples[@]} == 0)) || copy_tree "$module_dir" "$staging/examples" "${examples[@]}"

    printf '{"name": "%s", "module": "%s", "version": "%s", "package": "%s", "binary": "bin/%s", "recipe": "%s", "build_seconds": %d}\n' \
        "$name" "$module" "$version" "$package" "$binary" "$recipe_hash" "$((SECONDS - started))" \
        >"$staging/operator.json"

    rm -rf "$out/bin" "$out/crds" "$out/webhooks" "$out/examples"
    local part
    for part in crds webhooks examples bin; do
        [[ -e "$staging/$part" ]] && mv "$staging/$part" "$out/$part"
    done
    mv "$staging/operator.json" "$out/operator.json"  # last: marks the build complete
    rm -rf "$staging"
    trap - EXIT
    log "$name: built in $((SECONDS - started))s: $out"
    printf '%s\n' "$out"
    exec 9>&-
}

cache_root="${PODIUM_CACHE:-$HOME/.cache/podium}/operators"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=2"
export CGO_ENABLED=0
build_flags=(-trimpath "-ldflags=-s -w")

names=("$@")
((${#names[@]})) || names=("${all[@]}")
for name in "${names[@]}"; do
    recipe "$name"  # fail on an unknown name before building anything
done
for name in "${names[@]}"; do
    build_one "$name"
done
