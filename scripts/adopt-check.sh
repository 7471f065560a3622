#!/usr/bin/env bash
# adopt-check: a user's first steps with the version the CHANGELOG releases,
# offline, from this checkout's commit as it would be published.
#
# tools/modproxy writes the core and every contrib module at that version
# into a module proxy on disk; then, in a fresh module outside the checkout,
# with a fresh module cache, this script `go get`s each of them, builds and
# runs a program importing all of them, installs the command with
# `go install github.com/retrace-go/retrace/cmd/retrace@VERSION`, and checks
# that `retrace version` prints VERSION. Every other module comes from the
# module cache's download directory, which `go mod download` in the core and
# in each contrib module (.ci/run does both) fills: nothing is fetched from
# the network. It prints each command and its output.
#
#   scripts/adopt-check.sh            (CI runs it after the contrib modules' tests)
#
# What is published is the commit (HEAD), not uncommitted edits.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

work="$(mktemp -d)"
# The module cache's files are read-only: made writable to be removed.
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

show() {
  echo "\$ $*"
  "$@"
}

# The proxy, built with the caller's Go settings (tools/modproxy's own
# dependency, golang.org/x/mod, comes from the module proxy like any other).
show go -C tools/modproxy run . -repo "$repo" -out "$work/proxy"
core=github.com/retrace-go/retrace
version="$(tail -n 1 "$work/proxy/$core/@v/list")"
modules=("$core")
for dir in "$work/proxy/$core"/contrib/*/; do
  modules+=("$core/contrib/$(basename "$dir")")
done

downloads="$(go env GOMODCACHE)/cache/download"
# The user's environment, outside the checkout:
# - GOPROXY: this proxy first, then the module cache's download directory for
#   every other module (a file proxy answers "not found" for what it lacks,
#   so the go command asks the next);
# - GOMODCACHE: a fresh module cache, so that the modules come from the
#   proxy, and no module built here is left in the machine's;
# - GOFLAGS: -mod=mod, go get and go build may update go.mod and go.sum, as
#   in a user's module; -trimpath, so that the build cache serves packages
#   compiled from another module cache directory (every run has a new one);
#   and -race if the caller's GOFLAGS has it (CI builds everything with it,
#   so that every dependency compiled for the tests serves this build too,
#   instead of compiling them all once more);
# - GONOSUMDB: retrace's modules at this version are in no checksum
#   database (they were made from this commit a moment ago; sum.golang.org
#   has not seen them, or has seen those of the commit the tag names), so
#   the go command is told not to ask it for them.
#   Every other module is checked against go.sum, seeded with the lines of
#   the checkout's go.sum files: the hashes CI verified when it downloaded
#   them. (GONOSUMCHECK is no setting of the go command.)
export GOWORK=off GOTOOLCHAIN=local
race=
case " ${GOFLAGS:-} " in *" -race "*) race=" -race" ;; esac
export GOFLAGS="-mod=mod -trimpath$race"
export GOPROXY="file://$work/proxy,file://$downloads"
export GOMODCACHE="$work/modcache"
export GONOSUMDB="$core"
export GOBIN="$work/bin"
export GOPRIVATE= GONOPROXY=
echo "GOPROXY=$GOPROXY"
echo "GOMODCACHE=$GOMODCACHE GOFLAGS=\"$GOFLAGS\" GONOSUMDB=$GONOSUMDB GOWORK=$GOWORK"

# A user's module: go get each module at the version, then a program that
# imports every one of them.
mkdir -p "$work/user"
cd "$work/user"
printf 'module example.com/adopt\n\ngo 1.26.0\n' >go.mod
cat "$repo/go.sum" "$repo"/contrib/*/go.sum | sort -u >go.sum
for m in "${modules[@]}"; do
  show go get "$m@$version"
done
{
  echo 'package main'
  echo
  echo 'import ('
  echo '	"context"'
  echo '	"fmt"'
  echo
  echo "	\"$core/middleware\""
  echo "	\"$core/policies\""
  for m in "${modules[@]:1}"; do
    echo "	_ \"$m\""
  done
  echo ')'
  echo
  echo 'func main() {'
  echo '	layer := middleware.Policies[string, string]("adopt", policies.NewRetry[string](policies.SessionRetry))'
  echo '	greet := layer(func(_ context.Context, name string) (string, error) { return "hello, " + name, nil })'
  echo '	fmt.Println(greet(context.Background(), "retrace"))'
  echo '}'
} >main.go
show cat main.go
show go build -o adopt .
show ./adopt
echo "\$ grep $core go.mod"
grep "$core" go.mod
echo "\$ go version -m adopt | grep $core"
go version -m adopt | grep "$core"
# The binary's build information names each module at the version, from
# the proxy: not replaced, and with the hash the proxy's zip has.
for m in "${modules[@]}"; do
  if ! go version -m adopt | grep -qE "^[[:space:]]+dep[[:space:]]+$m[[:space:]]+$version[[:space:]]+h1:"; then
    echo "FAIL: the program was not built with $m $version from the proxy" >&2
    exit 1
  fi
done

# The command, installed as the README says. go install pkg@version reads
# no go.mod or go.sum of the user's: with the checksum database on, it would
# ask sum.golang.org for every module, and offline it cannot. GOSUMDB=off
# for this one command; what it built from is checked below instead.
cd "$work"
show env GOSUMDB=off go install "$core/cmd/retrace@$version"
echo "\$ $GOBIN/retrace version"
got="$("$GOBIN/retrace" version)"
echo "$got"
if [ "$got" != "retrace $version" ]; then
  echo "FAIL: retrace version printed \"$got\", want \"retrace $version\"" >&2
  exit 1
fi

# Every module zip the check took from the cache's download directory (for
# the program and for go install) has the hash a go.sum of the checkout
# holds for it: these are the bytes CI verified, not others.
cat "$repo/go.sum" "$repo"/contrib/*/go.sum | sort -u >"$work/checkout.sum"
checked=0
while IFS= read -r ziphash; do
  rel="${ziphash#"$GOMODCACHE/cache/download/"}"
  # The cache escapes an upper-case letter as "!" and its lower case.
  mod="$(sed 's/!\([a-z]\)/\u\1/g' <<<"${rel%/@v/*}")"
  ver="$(sed 's/!\([a-z]\)/\u\1/g' <<<"$(basename "$ziphash" .ziphash)")"
  case "$mod" in "$core" | "$core"/*) continue ;; esac
  if ! grep -qxF "$mod $ver $(cat "$ziphash")" "$work/checkout.sum"; then
    echo "FAIL: $mod $ver: its zip's hash $(cat "$ziphash") is in no go.sum of the checkout" >&2
    exit 1
  fi
  checked=$((checked + 1))
done < <(find "$GOMODCACHE/cache/download" -name '*.ziphash')
echo "the hashes of the $checked other modules' zips are the checkout's go.sum's"
echo "adopt-check: ok, ${#modules[@]} modules at $version"
