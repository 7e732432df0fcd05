#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the pinned Go
# module in testing/cluster/controlplane, once, into a cache folder outside the repository, and
# prints that folder. A later call with the same go.mod, go.sum and Go version prints it again
# without building. Needs Go (1.26+) and the Go module proxy; prints nothing to stdout but the
# folder, so `BIN=$(bash testing/cluster/build-controlplane.sh)` works.
#
#   GPUSCHED_CONTROLPLANE_CACHE  where builds are kept (default ~/.cache/gpusched/controlplane)
set -euo pipefail
here="$(cd "$(dirname "$0")/controlplane" && pwd)"
command -v go >/dev/null 2>&1 || { echo "build-controlplane: Go is not installed" >&2; exit 3; }
k8s_version="v1.37.2"
key="$(cat "$here/go.mod" "$here/go.sum" <(go env GOVERSION) | sha256sum | cut -c1-12)"
root="${GPUSCHED_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpusched/controlplane}"
out="$root/kubernetes-$k8s_version-$key"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)
complete() {
    [[ -f "$out/.complete" ]] || return 1
    for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || return 1; done
}
# Two runs at once (two test sessions, two worktrees) build once: the second waits for the
# first's lock, then finds the build complete.
mkdir -p "$root"
exec 9>"$root/.lock-controlplane"
flock 9
if ! complete; then
    staging="$(mktemp -d "$root/.build-XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    echo "build-controlplane: building Kubernetes $k8s_version into $out (first time: many minutes)" >&2
    start=$SECONDS
    pkg=k8s.io/component-base/version
    ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$staging/" \
        ./cmd/etcd \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler)
    touch "$staging/.complete"
    rm -rf "$out"
    mv "$staging" "$out"
    trap - EXIT
    echo "build-controlplane: built in $((SECONDS - start)) s" >&2
fi
echo "$out"
