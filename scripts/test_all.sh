#!/usr/bin/env bash
# `make test` after set-up: every notebook (nbval), every test, every other CPU kernel path.
# Much of the suite waits (ranks starting, sleeping link threads, a kernel or a browser), so
# three streams run side by side and fill each other's waits (measured in benchmarks/README.md,
# "make test"):
#   notebooks: nbval over every notebook, logging their figures (tests/notebook_figures.py),
#              then the tests that read that log (-m notebooks), then $MOVED (the suite's
#              longest test, `animate all`, and tests/test_zero.py's live sweeps);
#   programs:  the tests that drive other programs: chromium and JupyterLab (-m browser), the
#              CLI, torchrun, ranks' stderr and resilience (killed ranks, runs side by side)
#              ($PROGRAMS), then the kernel paths (scripts/test_kernels.sh: numeric comparisons
#              under other ATEN_CPU_CAPABILITY, not timings);
#   tests:     every other test but the serial ones.
# $MOVED and test_resilience.py (mostly waits) run outside the tests stream, which otherwise
# ends last (the streams' times: benchmarks/README.md, "make test").
# Then, alone, the `serial` tests: timing physics (pinned cores, the link's overlap, fits of α
# and β) that need the cores to themselves. Each stream writes its log to $OUT and prints it
# when it ends; a failing stream fails `make test`.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${TEST_OUT:-out/test}
FIGURE_LOG=$(realpath -m "${FIGURE_LOG:-out/notebook-figures}")
mkdir -p "$OUT"
start=$SECONDS

# marked FILE...: the test files that use marker $1 (collecting only those takes seconds, not
# the whole suite's collection again)
marked() { grep -l "mark\.$1\b" tests/test_*.py; }
MOVED="tests/test_export.py::test_animate_all_builds_every_scene_from_fresh_runs_with_progress tests/test_zero.py"
PROGRAMS="tests/test_cli.py tests/test_torchrun.py tests/test_rank_stderr.py tests/test_resilience.py"

notebooks() {
  "${MAKE:-make}" --no-print-directory test-notebooks PY="$PY" FIGURE_LOG="$FIGURE_LOG" &&
  DPVIZ_FIGURE_LOG_DIR=$FIGURE_LOG "$PY" -m pytest $(marked notebooks) -m "notebooks and not serial" &&
  "$PY" -m pytest $MOVED -m "not notebooks and not serial and not browser"
}

programs() {
  "$PY" -m pytest $(marked browser) -m "browser and not notebooks and not serial" --durations=5 &&
  "$PY" -m pytest $PROGRAMS -m "not browser and not notebooks and not serial" --durations=5 &&
  PY=$PY bash scripts/test_kernels.sh
}

tests() {
  local skip=() f
  for f in $PROGRAMS; do skip+=(--ignore "$f"); done
  for f in $MOVED; do [[ $f == *::* ]] && skip+=(--deselect "$f") || skip+=(--ignore "$f"); done
  "$PY" -m pytest tests "${skip[@]}" -m "not notebooks and not serial and not browser" --durations=10
}

# run_stream NAME: the stream's function, its output to $OUT/NAME.log, printed when it ends
run_stream() {
  local began=$SECONDS rc
  "$1" >"$OUT/$1.log" 2>&1
  rc=$?
  echo "== stream $1 (exit $rc, $((SECONDS - began)) s):"
  cat "$OUT/$1.log"
  return $rc
}

set -m   # each stream its own process group: an interrupted make test ends them all, ranks included
run_stream notebooks & notebooks_pid=$!
run_stream tests & tests_pid=$!
run_stream programs & programs_pid=$!
trap 'kill -- -$notebooks_pid -$tests_pid -$programs_pid 2>/dev/null' EXIT
echo "== streams notebooks, tests and programs started side by side (follow: tail -f $OUT/*.log)"
wait $notebooks_pid; notebooks_rc=$?
wait $tests_pid; tests_rc=$?
wait $programs_pid; programs_rc=$?
echo "== streams notebooks, tests and programs side by side: $((SECONDS - start)) s"

# settle: the serial tests time physics on both cores, so wait (at most 60 s) until the cores
# are idle: what the streams started (a browser, a kernel's ranks) may take seconds to exit. The
# busiest processes are printed if it has to wait, so a leftover is named in the log.
settle() {
  local i u1 n1 s1 i1 u2 n2 s2 i2 busy idle
  for i in $(seq 60); do
    read -r _ u1 n1 s1 i1 _ < /proc/stat; sleep 1; read -r _ u2 n2 s2 i2 _ < /proc/stat
    busy=$(( u2 + n2 + s2 - u1 - n1 - s1 )); idle=$(( i2 - i1 ))
    (( 4 * busy <= busy + idle )) && return   # under a quarter of the cores busy
    (( i == 1 )) && { echo "== waiting for the cores to be idle before the serial tests:"; ps -eo pcpu,etime,args --sort=-pcpu | head -4 | cut -c1-160; }
  done
  echo "== the cores stayed busy for 60 s; the serial tests run anyway"
}

settle
began=$SECONDS
"$PY" -m pytest $(marked serial) -m serial --durations=5
serial_rc=$?
echo "== serial tests, alone: $((SECONDS - began)) s"
exit $((notebooks_rc || tests_rc || programs_rc || serial_rc))
