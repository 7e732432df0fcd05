#!/usr/bin/env bash
# Builds one of the controllers the tests run beside the control plane (KubeRay, Kueue, ...)
# from its pinned Go module in testing/cluster/<name>/, once, into a cache folder outside the
# repository, and prints that folder. A later call with the same go.mod, go.sum, build.list, own
# Go sources (a main.go of ours) and Go version prints it again without building. Like
# build-controlplane.sh it needs Go and the Go module proxy, and prints nothing to stdout but
# the folder:
#
#   KUBERAY=$(bash testing/cluster/build-go.sh kuberay)
#
# <name>/build.list says what to build and what to keep, one item a line:
#   bin  <binary name>  <Go package>          go build of the package into the folder
#   file <Go module>    <path in the module>  a file shipped in the module (its CRDs), copied
#                                             to the folder under the same path
#   toolchain <go1.N.M>                       the Go toolchain to build with, where the module
#                                             needs a newer Go than the one installed (the go
#                                             command fetches it from the module proxy)
#
#   GPUSCHED_CONTROLPLANE_CACHE  where builds are kept (default ~/.cache/gpusched/controlplane)
set -euo pipefail
name="${1:?usage: build-go.sh <name of a folder under testing/cluster>}"
here="$(cd "$(dirname "$0")/$name" && pwd)"
command -v go >/dev/null 2>&1 || { echo "build-go: Go is not installed" >&2; exit 3; }
toolchain="$(awk '$1 == "toolchain" { print $2 }' "$here/build.list")"
if [[ -n "$toolchain" ]]; then
    export GOTOOLCHAIN="$toolchain"
fi
# The key covers a folder's own Go sources too (a main.go of ours; not tools.go, which only
# keeps the module in go.mod).
mapfile -t sources < <(find "$here" -maxdepth 1 -name '*.go' ! -name tools.go | sort)
key="$(cat "$here/go.mod" "$here/go.sum" "$here/build.list" "${sources[@]}" <(go env GOVERSION) \
    | sha256sum | cut -c1-12)"
root="${GPUSCHED_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpusched/controlplane}"
out="$root/$name-$key"
# Two runs at once (two test sessions, two worktrees) build once: the second waits for the
# first's lock, then finds the build complete.
mkdir -p "$root"
exec 9>"$root/.lock-$name"
flock 9
if [[ ! -f "$out/.complete" ]]; then
    staging="$(mktemp -d "$root/.build-$name-XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    echo "build-go: building $name into $out (first time: minutes)" >&2
    start=$SECONDS
    while read -r what first second; do
        case "$what" in
        bin)
            (cd "$here" && CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" \
                -o "$staging/$first" "$second") ;;
        file)
            dir="$(cd "$here" && go list -m -f '{{.Dir}}' "$first")"
            mkdir -p "$staging/$(dirname "$second")"
            cp "$dir/$second" "$staging/$second"
            chmod u+w "$staging/$second" ;;
        toolchain | "" | "#"*) ;;
        *) echo "build-go: $here/build.list: unknown item '$what'" >&2; exit 2 ;;
        esac
    done <"$here/build.list"
    touch "$staging/.complete"
    rm -rf "$out"
    mv "$staging" "$out"
    trap - EXIT
    echo "build-go: built $name in $((SECONDS - start)) s" >&2
fi
echo "$out"
