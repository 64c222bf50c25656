#!/bin/sh
# Integration tests against a real corrald from BUILD_DIR (default build).
set -eu
cd "$(dirname "$0")/.."
CORRAL_BUILD=${1:-build}
export CORRAL_BUILD
exec /usr/bin/python3 -m pytest tests/integration -q -p no:cacheprovider --durations=40
