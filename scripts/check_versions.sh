#!/usr/bin/env bash
# Repeat the version run (README, "Versions run"): the test suite under each PYTHON:TORCH pair,
# each in its own virtual environment, then one table of what passed.
#
#   scripts/check_versions.sh                      # the pairs the README reports
#   scripts/check_versions.sh 3.12:2.13.0          # one pair
#
# VERSIONS_DIR (default ~/.cache/dpviz-versions) holds the venvs and logs/: per pair the
# install and test logs and pytest's junit XML, and table.md. A venv is made once and reused:
# any torch but the local CPU wheel (2.13.0 for Python 3.11 here) is a multi-GB CUDA build
# from the registry (it runs on CPU), so this is a maintainer's run, never CI's.
# PYTEST_ARGS (default: the suite without the browser tests, which drive the main .venv's
# JupyterLab in chromium, and without the notebook tests, which read what `make
# test-notebooks` logged in the main .venv) says what runs. Tests run niced, one pair at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${VERSIONS_DIR:-$HOME/.cache/dpviz-versions}
LOGS=$DIR/logs
PAIRS=("$@")
((${#PAIRS[@]})) || PAIRS=(3.11:2.11.0 3.11:2.15.0 3.10:2.13.0 3.12:2.13.0 3.13:2.13.0)
if [ -n "${PYTEST_ARGS:-}" ]; then
  read -r -a TEST_ARGS <<<"$PYTEST_ARGS"
else
  TEST_ARGS=(tests -m "not browser and not notebooks")
fi
mkdir -p "$LOGS"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# find_python PY: an interpreter of that version: on PATH, or one of pyenv's (whose shims
# answer only for the versions pyenv is told to use)
find_python() {
  local cand
  for cand in "python$1" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    "$cand" -c "" 2>/dev/null && { echo "$cand"; return 0; }
  done
  return 1
}

# prepare PY TORCH VENV: the venv with that torch, then dpviz (editable, [dev]) beside it.
# The venv's constraints file (torch==TORCH) stands in for any site-wide pip constraint, so
# installing dpviz can neither replace the torch under test nor be capped below it.
prepare() {
  local py=$1 torch=$2 venv=$3 log=$4
  : >"$log"
  if [ ! -x "$venv/bin/python" ]; then
    local python
    python=$(find_python "$py") || { echo "no Python $py found (PATH, pyenv)" >"$log"; return 1; }
    "$python" -m venv "$venv" >>"$log" 2>&1 || return 1
  fi
  echo "torch==$torch" >"$venv/constraints.txt"
  export PIP_CONSTRAINT=$venv/constraints.txt
  { "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch')" 2>/dev/null \
      || nice -n 10 "$venv/bin/python" -m pip install -q "torch==$torch"; } >>"$log" 2>&1 || return 1
  # dpviz itself: once per venv, again when pyproject changes
  [ "$venv/.dpviz-installed" -nt "$ROOT/pyproject.toml" ] && return 0
  nice -n 10 "$venv/bin/python" -m pip install -q -e "$ROOT[dev]" >>"$log" 2>&1 && touch "$venv/.dpviz-installed"
}

# count XML: "passed failed errors skipped" from pytest's junit XML
count() {
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s[0]
n, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(n - f - e - k, f, e, k)
EOF
}

# failed_ids XML: the node ids of the tests that failed or erred, one per line
failed_ids() {
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
        print(case.get("classname").replace(".", "/") + ".py::" + case.get("name"))
EOF
}

rows=() status=0
for pair in "${PAIRS[@]}"; do
  py=${pair%%:*} torch=${pair##*:}
  name=py${py/./}-torch$torch
  venv=$DIR/$name
  echo "== Python $py, torch $torch: preparing $venv"
  if ! prepare "$py" "$torch" "$venv" "$LOGS/$name.install.log"; then
    echo "== Python $py, torch $torch: install FAILED (tail of $LOGS/$name.install.log):"
    tail -n 15 "$LOGS/$name.install.log"
    rows+=("| $py | $torch | install failed | | | | | $(date -u '+%F %H:%M') |")
    status=1
    continue
  fi
  actual=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
  start=$SECONDS
  echo "== Python $py, torch $actual: ${TEST_ARGS[*]} (log: $LOGS/$name.log)"
  (cd "$ROOT" && nice -n 10 "$venv/bin/python" -m pytest "${TEST_ARGS[@]}" -q \
      -p no:cacheprovider --junitxml "$LOGS/$name.xml") >"$LOGS/$name.log" 2>&1
  tail -n 1 "$LOGS/$name.log"
  read -r passed failed errors skipped < <(count "$LOGS/$name.xml")
  minutes=$(( (SECONDS - start) / 60 )) again=0
  if ((failed + errors)); then   # once more, alone: a failure that passes then is load or order
    mapfile -t ids < <(failed_ids "$LOGS/$name.xml")
    echo "== rerunning ${#ids[@]} failed test(s) (log: $LOGS/$name.rerun.log)"
    (cd "$ROOT" && nice -n 10 "$venv/bin/python" -m pytest "${ids[@]}" -q -p no:cacheprovider \
        --junitxml "$LOGS/$name.rerun.xml") >"$LOGS/$name.rerun.log" 2>&1
    read -r _ f e _ < <(count "$LOGS/$name.rerun.xml")
    again=$((f + e))
    ((again == 0)) || status=1
  fi
  rows+=("| $py | $actual | $passed | $failed | $errors | $skipped | $again | $(date -u '+%F %H:%M') ($minutes min) |")
done

{
  echo "pytest ${TEST_ARGS[*]}"
  echo
  echo "| Python | torch | passed | failed | errors | skipped | failed again, rerun alone | run (UTC) |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$LOGS/table.md"
exit $status
