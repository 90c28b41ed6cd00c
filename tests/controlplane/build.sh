#!/usr/bin/env bash
# Builds the test control plane from the pinned Go modules beside this script into ./bin, which git
# ignores: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the real node's kubelet
# (kube/), the real node's CoreDNS (coredns/), pause container (pause/) and metrics-server (metrics/), and
# the in-cluster training engines with their CRDs: JobSet (jobset/), Kubeflow's Training Operator
# (kubeflow/) and the Kueue job queue (kueue/). Each part is built once per machine and stamp (a hash of its pins, its sources and this
# script) into a cache outside the repository, from which a fresh checkout's bin/ takes it in seconds.
set -euo pipefail
shopt -s nullglob
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
cache=${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-distrain/controlplane
export CGO_ENABLED=0 GOFLAGS='-mod=readonly -buildvcs=false'  # the same binary from any checkout
# go build as each part builds: without a symbol table and DWARF (nothing here reads them; a panic's trace is still
# named), which halve the kube part's link; $ldflags, the part's own link flags
gobuild() { go build -trimpath -ldflags "-s -w ${ldflags:-}" "$@"; }
mkdir -p "$bin" "$cache"

# build PART COMMAND: unless bin/ has PART at its stamp, links it in from the cache, where COMMAND, run in
# PART's folder, first writes it under $out (dropping the cache's other stamps of PART)
build() {
  local part=$1; shift
  local stamp built
  stamp=$(cat "$here/build.sh" "$here/$part"/go.mod "$here/$part"/go.sum "$here/$part"/*.go | sha256sum | cut -c1-16)
  if [ "$(cat "$bin/.stamp-$part" 2>/dev/null)" = "$stamp" ]; then return; fi
  built=$cache/$part-$stamp
  if [ ! -d "$built" ]; then
    echo "building $part of the test control plane into $built (minutes on a cold cache)" >&2
    out=$cache/$part.partial
    rm -rf "$cache/$part"-* "$out" && mkdir "$out"
    (cd "$here/$part" && "$@")
    mv "$out" "$built"
  fi
  cp -al --remove-destination "$built/." "$bin/"
  echo "$stamp" > "$bin/.stamp-$part"
}

etcd() { gobuild -o "$out/etcd" .; }
build etcd etcd

kube() {
  local version minor kwok
  version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' go.mod)
  minor=$(echo "$version" | cut -d. -f2)
  ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor" gobuild -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet sigs.k8s.io/kwok/cmd/kwok
  # kwok's own node stages (Ready, heartbeat) and the Logs resource, from the pinned module
  kwok=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$out/stages"
  cp "$kwok/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kwok/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" "$out/stages/"
  cp "$kwok/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$out/"
}
build kube kube
coredns() { gobuild -o "$out/coredns" .; }
build coredns coredns
pause() { gobuild -o "$out/pause" .; }
build pause pause
metrics() { gobuild -o "$out/metrics-server" .; }
build metrics metrics

# the JobSet controller (its webhooks are registered by cluster.py) and its CRD
jobset() {
  gobuild -o "$out/jobset" sigs.k8s.io/jobset
  mkdir -p "$out/crds"
  cp "$(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$out/crds/"
}
build jobset jobset

# Kubeflow's Training Operator (TFJob, PyTorchJob, PaddleJob controllers and webhooks; kubeflow/main.go) and its CRDs
kubeflow() {
  gobuild -o "$out/training-operator" .
  mkdir -p "$out/crds"
  local crds
  crds=$(go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)/manifests/base/crds
  cp "$crds/kubeflow.org_tfjobs.yaml" "$crds/kubeflow.org_pytorchjobs.yaml" "$crds/kubeflow.org_paddlejobs.yaml" "$out/crds/"
}
build kubeflow kubeflow

# Kueue (its webhooks are registered by cluster.py, from its own manifest) and its CRDs
kueue() {
  gobuild -o "$out/kueue" sigs.k8s.io/kueue/cmd/kueue
  mkdir -p "$out/crds"
  local config
  config=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components
  cp "$config"/crd/bases/kueue.x-k8s.io_*.yaml "$out/crds/"
  cp "$config/webhook/manifests.yaml" "$out/kueue-webhooks.yaml"
}
build kueue kueue
