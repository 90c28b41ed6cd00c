#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) from the pinned Go modules beside this script into ./bin,
# which git ignores. Rebuilds only when a pin or this script changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
stamp=$(cat "$here/build.sh" "$here"/*/go.mod "$here"/*/go.sum "$here"/etcd/*.go | sha256sum | cut -c1-16)
if [ "$(cat "$bin/.stamp" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
echo "building the test control plane into $bin (minutes on a cold cache)" >&2
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
rm -rf "$bin" && mkdir -p "$bin"
version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/kube/go.mod")
minor=$(echo "$version" | cut -d. -f2)
stamped="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
(cd "$here/etcd" && go build -trimpath -o "$bin/etcd" .)
(cd "$here/kube" && go build -trimpath -ldflags "$stamped" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler sigs.k8s.io/kwok/cmd/kwok)
# kwok's own node stages (Ready, heartbeat) and the Logs resource, from the pinned module
kwok=$(cd "$here/kube" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir -p "$bin/stages"
cp "$kwok/kustomize/stage/node/fast/node-initialize.yaml" \
   "$kwok/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" "$bin/stages/"
cp "$kwok/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$bin/"
echo "$stamp" > "$bin/.stamp"
