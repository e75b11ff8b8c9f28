#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) with every warning an error: set up .venv with the docs extra
# (DOCS=1 bash scripts/setup_env.sh), then `mkdocs build --strict` into site/. `bash scripts/docs.sh serve` serves it
# at http://127.0.0.1:8000 instead (rebuilding as pages change). VENV / STACK as in setup_env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-build}" == serve ]]; then
  exec env DOCS=1 bash scripts/setup_env.sh -m mkdocs serve --strict
fi
exec env DOCS=1 bash scripts/setup_env.sh -m mkdocs build --strict "$@"
