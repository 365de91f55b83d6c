#!/usr/bin/env bash
# Creates the Python venv the interop tests use (a stock python-socketio
# client and cbor2, and the official openai and anthropic SDKs for the
# abridge tests, from PyPI), at target/interop-venv; does nothing if it
# exists.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/target/interop-venv"
# Test binaries may ask at the same time: one creates it, the others wait.
mkdir -p "$root/target"
exec 9>"$root/target/interop-venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import socketio, aiohttp, cbor2, openai, anthropic" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "python-socketio>=5,<6" "aiohttp>=3.8,<4" "cbor2>=5,<7" \
    "openai>=1.40,<3" "anthropic>=0.40,<1"
