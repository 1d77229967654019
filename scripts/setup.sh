#!/usr/bin/env bash
# Set up a fresh checkout: Debian libraries for manim and the browser test, then .venv/.
# Idempotent: a second run only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(libcairo2-dev libpango1.0-dev pkg-config chromium)
missing=()
for pkg in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "== installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
echo "== installing dpviz and its dependencies into .venv (torch==2.13.0, CPU)"
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned, so nothing later can pull a multi-GB CUDA build
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[dev]"
touch .venv/.dpviz-installed
echo "== set-up done"
