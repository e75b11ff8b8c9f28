#!/usr/bin/env bash
# Create a virtual environment and install prismatic_tr with every extra into it.
#   STACK=newest  (default) the newest releases as locked in constraints/newest.txt (torch, transformers, timm and
#                 every other package pinned; Python 3.11, linux x86_64; refresh with scripts/lock.sh)
#   STACK=latest  the newest releases from the registry today, unpinned (installed packages are upgraded)
#   STACK=openvla OpenVLA's pins (torch 2.2.0, timm 0.9.10, transformers 4.40.1, ...): constraints/openvla.txt
#   VENV=path     where the environment goes (default .venv; .venv-latest, .venv-openvla for the other stacks)
#   DOCS=1        also install the docs extra (mkdocs, Material, mkdocstrings: scripts/docs.sh builds the site)
#   METAWORLD=1   also install the metaworld extra (MetaWorld benchmark: prismatic_tr.envs.metaworld) and the OSMesa
#                 library that renders it on a CPU (apt-get install libosmesa6, when missing and run as root)
# Any arguments are then run with the environment's python (`setup_env.sh -m pytest -q`), or, when the first is one
# of its console scripts, by that command (`setup_env.sh prismatic-tr-benchmark --preset tiny`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Let Python cache compiled modules: without it every process recompiles torch._dynamo (~15 s each).
unset PYTHONDONTWRITEBYTECODE
STACK=${STACK:-newest}
case "$STACK" in
  newest) VENV=${VENV:-.venv}; install_args=(-c constraints/newest.txt) ;;
  latest) VENV=${VENV:-.venv-latest}; install_args=(--upgrade) ;;
  openvla) VENV=${VENV:-.venv-openvla}; install_args=(-c constraints/openvla.txt) ;;
  *) echo "STACK=$STACK is not allowed; use newest, latest or openvla" >&2; exit 2 ;;
esac
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check uv
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  uv venv -q -p python3 "$VENV"
fi
extras=all
case "${METAWORLD:-0}" in
  0) ;;
  1) extras=all,metaworld ;;
  *) echo "METAWORLD=$METAWORLD is not allowed; use 0 or 1" >&2; exit 2 ;;
esac
case "${DOCS:-0}" in
  0) ;;
  1) extras=$extras,docs ;;
  *) echo "DOCS=$DOCS is not allowed; use 0 or 1" >&2; exit 2 ;;
esac
if [[ "$extras" == *metaworld* ]] && ! ldconfig -p 2>/dev/null | grep -q libOSMesa; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing libosmesa6 (OSMesa: MetaWorld's offscreen rendering on a CPU)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 >/dev/null
  else
    echo "MetaWorld renders on a CPU with OSMesa, which is missing: install it (Debian/Ubuntu: sudo apt-get install" \
      "libosmesa6); the MetaWorld tests are skipped until then" >&2
  fi
fi
if ! VIRTUAL_ENV="$VENV" uv pip install -q -e ".[$extras]" "${install_args[@]}"; then
  if [[ "$STACK" == newest ]]; then
    echo "constraints/newest.txt locks Python 3.11 on linux x86_64; elsewhere use STACK=latest (unpinned)," \
      "or refresh the lock with scripts/lock.sh" >&2
  fi
  exit 1
fi
echo "installed prismatic_tr[$extras] ($STACK stack) into $VENV"
if [[ $# -gt 0 ]]; then
  if [[ "$1" == prismatic-tr-* ]]; then
    exec "$VENV/bin/$1" "${@:2}"
  fi
  exec "$VENV/bin/python" "$@"
fi
