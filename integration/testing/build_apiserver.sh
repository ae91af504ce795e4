#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into a per-user cache, once per machine.
# Prints the folder holding both binaries on its last line.
#
# Why a script and not released binaries: only the Go module proxy is reachable from the machines
# this project runs on. k8s.io/kubernetes points its staging modules (k8s.io/api, client-go, ...)
# at local folders, so a module of our own requires it and pins every staging module to the
# matching v0.x tag; etcd's server module has local replaces too, so a tiny main of our own
# requires go.etcd.io/etcd/server/v3 and pins its sibling modules the same way.
set -euo pipefail

K8S_VERSION="${KAI_CP_K8S_VERSION:-v1.34.2}"
ETCD_VERSION="${KAI_CP_ETCD_VERSION:-v3.6.5}"
CACHE="${KAI_CP_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kai-cp/apiserver}"
OUT="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
NICE="${KAI_CP_BUILD_NICE:-nice -n 15}"

if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" ]]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || { echo "build_apiserver.sh: Go is needed (go.dev/dl)" >&2; exit 3; }
mkdir -p "$CACHE"
# One build at a time per machine: a second caller waits for the first and then finds the binaries.
exec 9>"$CACHE/.lock"
flock 9
if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" ]]; then
  echo "$OUT"
  exit 0
fi

export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
start=$(date +%s)
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$OUT"

# Staging modules: the replaces in kubernetes' own go.mod that point at ./staging/src/k8s.io/X.
pin_local_replaces() {  # $1 = go.mod of the dependency, $2 = version to pin the local modules to
  awk -v ver="$2" '
    /=> *\.\.?\// && !/FORBIDDEN/ { for (i = 1; i <= NF; i++) if ($i == "=>") { mod = $(i - 1); print "replace " mod " => " mod " " ver } }
  ' "$1" | sort -u
}

if [[ ! -x "$OUT/kube-apiserver" ]]; then
echo "[build_apiserver] kube-apiserver $K8S_VERSION" >&2
k8s_gomod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_ver="v0.${K8S_VERSION#v1.}"
mkdir -p "$work/k8s"
{
  echo "module kaicp.local/apiserverbuild"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  pin_local_replaces "$k8s_gomod" "$staging_ver"
} > "$work/k8s/go.mod"
ldv="k8s.io/component-base/version"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X $ldv.gitVersion=$K8S_VERSION -X $ldv.gitMajor=1 -X $ldv.gitMinor=$minor -X $ldv.gitTreeState=clean"
(cd "$work/k8s" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" >&2 \
  && $NICE go build -trimpath -ldflags "$ldflags" -o "$work/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
mv "$work/bin/kube-apiserver" "$OUT/"
fi

if [[ ! -x "$OUT/etcd" ]]; then
echo "[build_apiserver] etcd $ETCD_VERSION" >&2
etcd_gomod=$(cd "$work" && go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
mkdir -p "$work/etcd"
{
  echo "module kaicp.local/etcdbuild"
  echo
  echo "go 1.24"
  echo
  echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  pin_local_replaces "$etcd_gomod" "$ETCD_VERSION"
} > "$work/etcd/go.mod"
cat > "$work/etcd/main.go" <<'GO'
// etcd, built from go.etcd.io/etcd/server/v3 for kai-cp's API-server test tier.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
(cd "$work/etcd" && go mod tidy >&2 && $NICE go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" .)
mv "$work/bin/etcd" "$OUT/"
fi
echo "[build_apiserver] built in $(( $(date +%s) - start )) s" >&2
echo "$OUT"
