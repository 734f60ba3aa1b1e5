#!/usr/bin/env bash
# Set everything up (scripts/setup.sh), then run the linters and the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k edge
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy gateway router tiers cache admin_ui
.venv/bin/python -m pytest "$@"
