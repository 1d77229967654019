#!/usr/bin/env bash
# The numeric-equivalence tests (`-m numeric`) under every ATEN_CPU_CAPABILITY but the one
# torch picks by itself (`make test-kernels`). The kernel paths run side by side, each in its
# own pytest process with its own log and temp folder; two at once finish sooner than one
# after the other (timed in benchmarks/README.md, "make test"). A failing path prints its
# whole log.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${KERNELS_OUT:-out/kernels}
caps=$("$PY" scripts/aten_capabilities.py --extra) || exit 1
files=$(grep -l "mark\.numeric\b" tests/test_*.py)   # only these files: no whole-suite collection per path
mkdir -p "$OUT"
start=$SECONDS
declare -A pids
for cap in $caps; do
  ATEN_CPU_CAPABILITY=$cap "$PY" -m pytest $files -m numeric -q -p no:cacheprovider \
    --basetemp "$OUT/tmp-$cap" >"$OUT/$cap.log" 2>&1 &
  pids[$cap]=$!
done
status=0
for cap in $caps; do
  wait "${pids[$cap]}"
  rc=$?
  echo "== numeric-equivalence tests with ATEN_CPU_CAPABILITY=$cap: $(tail -n 1 "$OUT/$cap.log")"
  ((rc == 0)) || { cat "$OUT/$cap.log"; status=1; }
done
echo "== kernel paths $(echo $caps): $((SECONDS - start)) s, side by side"
exit $status
