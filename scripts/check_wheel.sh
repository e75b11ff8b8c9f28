#!/usr/bin/env bash
# Build the wheel (not editable), install it into a clean virtual environment and run, from a directory outside
# the checkout, the README's quick start and every console script's --help: what a user who runs
# `pip install prismatic_tr-<version>.whl` gets (the bundled policies and adapters included).
#   STACK=newest (default) | openvla: the constraints the clean environment installs with (as setup_env.sh)
#   VENV=path: the clean environment (default .venv-wheel; made afresh)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
STACK=${STACK:-newest}
case "$STACK" in
  newest) constraints=constraints/newest.txt ;;
  openvla) constraints=constraints/openvla.txt ;;
  *) echo "STACK=$STACK is not allowed; use newest or openvla" >&2; exit 2 ;;
esac
VENV=${VENV:-.venv-wheel}
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check uv
fi
dist=$(mktemp -d)
uv build -q --wheel --out-dir "$dist" .
wheel=$(ls "$dist"/*.whl)
echo "built $(basename "$wheel")"
rm -rf "$VENV"
uv venv -q -p python3 "$VENV"
VIRTUAL_ENV="$VENV" uv pip install -q "prismatic_tr[all] @ file://$wheel" -c "$constraints"
python="$root/$VENV/bin/python"
outside=$(mktemp -d)
# The README's quick start, as a user copies it (the first python block of its "## Quick start" section).
"$python" - "$root/README.md" "$outside/quick_start.py" <<'EOF'
import re
import sys

text = open(sys.argv[1]).read()
section = text[text.index("## Quick start"):]
match = re.search(r"```python\n(.*?)```", section, re.S)
if match is None:
    sys.exit("README.md: no python block under '## Quick start'")
open(sys.argv[2], "w").write(match.group(1))
EOF
cd "$outside"
"$python" -c "import prismatic_tr, sys; p = prismatic_tr.__file__; sys.exit(0 if '/site-packages/' in p else f'not the installed wheel: {p}')"
"$python" quick_start.py
echo "quick start ran from $outside with the installed wheel"
# Every console script, as its wrapper calls it (sys.argv = [name, "--help"]), in one process: --help exits 0.
"$python" - <<'EOF'
import contextlib
import io
import sys
from importlib.metadata import distribution

names = []
for entry in sorted(distribution("prismatic_tr").entry_points, key=lambda e: e.name):
    if entry.group != "console_scripts":
        continue
    sys.argv = [entry.name, "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            entry.load()()
    except SystemExit as stop:
        if stop.code not in (0, None):
            sys.exit(f"{entry.name} --help exited with {stop.code}")
    names.append(entry.name)
print("console scripts answer --help:", " ".join(names))
EOF
rm -rf "$dist" "$outside"
