#!/usr/bin/env bash
# Builds every binary the testbed needs from the Go module proxy and caches it by version outside the
# work tree, so a warm run takes seconds. Idempotent: a cached binary is never rebuilt.
#
#   test/tools/build.sh            build what is missing, with progress
#   test/tools/build.sh NAME...    only these binaries (e.g. the demo's: no MinIO, no GCS emulator)
#   JOBVAULT_CACHE=DIR ...         cache location (default: ~/.cache/jobvault)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../testbed/versions.env
source "$here/../testbed/versions.env"
cache=${JOBVAULT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobvault}
bin=$cache/bin
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

known=(kube-apiserver kube-controller-manager kubelet etcd vc-controller-manager vc-scheduler vc-webhook-manager kwok fake-gcs-server minio)
only=("$@")
for name in "${only[@]}"; do
	[[ " ${known[*]} " == *" $name "* ]] || { echo "build.sh: unknown binary $name (known: ${known[*]})" >&2; exit 2; }
done

start=$(date +%s)
step() { printf '[testbed %4ds] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# build NAME VERSION DIR PKG [go build args...]: builds PKG inside the tools module DIR (or with
# `go install PKG@VERSION` when DIR is "-") into $bin/NAME-VERSION/NAME, atomically.
build() {
	local name=$1 version=$2 dir=$3 pkg=$4; shift 4
	local out=$bin/$name-$version/$name
	if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then return; fi
	if [ -x "$out" ]; then step "$name $version: cached ($out)"; return; fi
	step "$name $version: building (first time only) ..."
	local t0 tmp
	t0=$(date +%s)
	tmp=$(mktemp -d "$bin/.build-$name-XXXXXX")
	if [ "$dir" = - ]; then
		GOBIN=$tmp go install "$@" "$pkg@$version"
		mv "$tmp/$(basename "${pkg%%@*}")" "$tmp/$name" 2>/dev/null || true
	else
		(cd "$dir" && go build -o "$tmp/$name" "$@" "$pkg")
	fi
	mkdir -p "$(dirname "$out")"
	mv "$tmp/$name" "$out"
	rm -rf "$tmp"
	step "$name $version: built in $(( $(date +%s) - t0 ))s"
}

kubever=${KUBE_VERSION#v}
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/component-base/version.gitMajor=${kubever%%.*} \
 -X k8s.io/component-base/version.gitMinor=$(echo "$kubever" | cut -d. -f2)"

build kube-apiserver "$KUBE_VERSION" "$here/kube" k8s.io/kubernetes/cmd/kube-apiserver -ldflags "$kube_ldflags"
build kube-controller-manager "$KUBE_VERSION" "$here/kube" k8s.io/kubernetes/cmd/kube-controller-manager -ldflags "$kube_ldflags"
# The real node's kubelet (testbed.RealNode), of the cluster's version.
build kubelet "$KUBE_VERSION" "$here/kube" k8s.io/kubernetes/cmd/kubelet -ldflags "$kube_ldflags"
build etcd "$ETCD_VERSION" "$here/kube" go.etcd.io/etcd/server/v3 -ldflags "-s -w"
build vc-controller-manager "$VOLCANO_VERSION" "$here/volcano" volcano.sh/volcano/cmd/controller-manager -ldflags "-s -w"
build vc-scheduler "$VOLCANO_VERSION" "$here/volcano" volcano.sh/volcano/cmd/scheduler -ldflags "-s -w"
build vc-webhook-manager "$VOLCANO_VERSION" "$here/volcano" volcano.sh/volcano/cmd/webhook-manager -ldflags "-s -w"
build kwok "$KWOK_VERSION" - sigs.k8s.io/kwok/cmd/kwok -ldflags "-s -w"
build fake-gcs-server "$FAKE_GCS_VERSION" - github.com/fsouza/fake-gcs-server -ldflags "-s -w"
build minio "$MINIO_VERSION" - github.com/minio/minio -ldflags "-s -w"
step "testbed binaries ready in $bin: ${only[*]:-all}"
