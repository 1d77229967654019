#!/usr/bin/env bash
# Set up a fresh checkout: Debian libraries for manim and the browser test, then .venv/.
# Idempotent: a second run only installs what is missing. One line per phase, with its time;
# the tools' own chatter goes to .venv/setup.log, shown only if a phase fails.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG=.venv/setup.log
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# phase NAME COMMAND...: run it quietly, then print "== NAME (N s)" or its log on failure
phase() {
  local name=$1 start=$SECONDS
  shift
  if "$@" >>"$LOG" 2>&1; then
    echo "== $name ($((SECONDS - start)) s)"
  else
    echo "== $name FAILED; its output:" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}

debs=(libcairo2-dev libpango1.0-dev pkg-config chromium)
missing=()
for pkg in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

mkdir -p .venv
: >"$LOG"
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  install_debs() {
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  }
  phase "Debian packages: ${missing[*]}" install_debs
fi

if [ ! -x .venv/bin/python ]; then
  phase "created .venv" python3 -m venv .venv
fi
phase "pip upgraded" .venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned, so nothing later can pull a multi-GB CUDA build
phase "torch==2.13.0 (CPU) installed" .venv/bin/python -m pip install -q torch==2.13.0
phase "dpviz and its dependencies installed (editable, [dev])" .venv/bin/python -m pip install -q -e ".[dev]"
touch .venv/.dpviz-installed
echo "== set-up done in $SECONDS s (the tools' own output: $LOG)"
