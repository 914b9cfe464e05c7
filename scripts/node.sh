#!/usr/bin/env bash
# Runs node on a supported runtime (Node 24 or newer): the machine's when it is one, else Node 26
# (the active LTS line) from the npm registry's `node` package (it carries the official binary),
# installed once into .tools/node. `scripts/node.sh --bin-dir` prints the directory to put first on
# PATH (nothing when the machine's node will do), for scripts that run npm and node many times
# (test-all.sh).
set -euo pipefail
tools="$(cd "$(dirname "$0")/.." && pwd)/.tools/node"
want=26
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
bin=""
if [ "$major" -lt 24 ]; then
  bin="$tools/node_modules/node/bin"
  have=$("$bin/node" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$have" != "$want" ]; then
    echo "transfer-sidecar: node $(node -v 2>/dev/null || echo '(none)') is older than 24 (end of life); installing Node $want into .tools/node" >&2
    npm install --prefix "$tools" --no-save --no-audit --no-fund --loglevel=error "node@$want" >&2
  fi
fi
if [ "${1:-}" = "--bin-dir" ]; then
  echo "$bin"
  exit 0
fi
[ -z "$bin" ] || PATH="$bin:$PATH"
exec node "$@"
