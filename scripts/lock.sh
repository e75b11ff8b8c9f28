#!/usr/bin/env bash
# Refresh constraints/newest.txt, the lock of the default stack (STACK=newest in scripts/setup_env.sh): every
# package prismatic_tr[all] and the metaworld extra need, pinned with ==, as uv resolves the newest releases today for Python 3.11 on
# linux x86_64 (the platform CI and the benchmarks run on). Then run CI (.ci/run) and commit the file.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check uv
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
uv pip compile -q pyproject.toml --extra all --extra metaworld --upgrade --python-version 3.11 \
  --python-platform x86_64-unknown-linux-gnu --custom-compile-command "bash scripts/lock.sh" -o "$tmp"
{
  echo "# The default stack's lock (STACK=newest in scripts/setup_env.sh, used as \`uv pip install -c\`): the newest"
  echo "# releases of everything prismatic_tr[all,metaworld] needs, as uv $(uv --version | cut -d' ' -f2) resolved them on $(date -u +%Y-%m-%d)"
  echo "# for Python 3.11 on linux x86_64. Refresh: bash scripts/lock.sh (then run .ci/run and commit)."
  echo "# STACK=latest installs the newest releases unpinned instead."
  cat "$tmp"
} > constraints/newest.txt
echo "wrote constraints/newest.txt ($(grep -c '==' constraints/newest.txt) pins)"
