# The two commands the README opens with: `make lab` and `make test`. Both set up a fresh
# checkout first (Debian packages, .venv/ with torch==2.13.0 and dpviz installed).
PY := .venv/bin/python
STAMP := .venv/.dpviz-installed
NODE_STAMP := node_modules/.dpviz-installed

.PHONY: setup lab tour book test test-notebooks test-kernels test-fast bench animations gpu-check gpu-bundle versions clean

setup: $(STAMP)
$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

lab: $(STAMP)  ## open the notebooks in JupyterLab on 127.0.0.1
	mkdir -p out && cp -rn scripts/lab-settings out/  # our defaults (no news prompt); your changes stay in out/
	JUPYTERLAB_SETTINGS_DIR=out/lab-settings $(PY) -m jupyter lab --ip 127.0.0.1 --no-browser --LabApp.news_url=None --notebook-dir notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

$(NODE_STAMP): package.json  ## the book's widget JavaScript (npm; not part of the Python package)
	npm install --no-audit --no-fund && touch $@

tour: $(STAMP)  ## headless: execute every notebook and write HTML to out/tour/
	$(PY) -m dpviz tour --out out/tour

book: $(STAMP) $(NODE_STAMP)  ## the course site: notebooks executed live + videos → out/book/html/
	$(PY) -m dpviz book --out out/book
	$(PY) scripts/check_site.py out/book/html

# Each notebook is executed once: nbval runs it in a kernel hooked to log every figure's
# legibility and every stderr write (tests/notebook_figures.py), and the tests read that log.
# scripts/test_all.sh runs the notebooks and the tests side by side, then the `serial` tests
# (timing physics) alone.
test: $(STAMP) $(NODE_STAMP)  ## every test: every notebook, unit + live ranks + scenes + browser, every CPU kernel path
	@start=$$(date +%s); \
	PY=$(PY) FIGURE_LOG=$(FIGURE_LOG) bash scripts/test_all.sh; \
	status=$$?; echo "== make test: $$(( $$(date +%s) - start )) s after set-up"; exit $$status

FIGURE_LOG := out/notebook-figures
NOTEBOOKS ?= notebooks
test-notebooks: $(STAMP)  ## nbval over $(NOTEBOOKS), logging the figures to $(FIGURE_LOG)/ for tests/test_notebook_legibility.py; a kernel that dies at start is started again (tests/nbval_kernel_retry.py)
	ipython_dir=$$($(PY) tests/notebook_figures.py $(FIGURE_LOG)) && \
	IPYTHONDIR=$$ipython_dir $(PY) -m pytest --nbval-lax -p no:cacheprovider -p tests.nbval_kernel_retry $(NOTEBOOKS)

# ATen sums in another order on each CPU kernel path (default, AVX2, AVX-512), so the tests
# that compare results with one process (`-m numeric`) run again under every other path the
# CPU supports: a comparison that holds only on one kind of CPU fails here, not on a newcomer's.
test-kernels: $(STAMP)  ## the numeric-equivalence tests under every other ATEN_CPU_CAPABILITY, side by side
	PY=$(PY) bash scripts/test_kernels.sh

test-fast: $(STAMP)  ## unit and live-rank tests only (no browser, no notebooks)
	$(PY) -m pytest tests -m "not browser and not notebooks"

bench: $(STAMP)  ## the benchmarks: ratios measured side by side
	for b in benchmarks/*.py; do \
	  case $$b in *hta_*) [ -n "$$HTA_PYTHON" ] || { echo "== $$b skipped: set HTA_PYTHON to a python with HTA"; continue; };; esac; \
	  $(PY) $$b || exit 1; \
	done

# The GPU check (scripts/gpu_check.py; tests/test_gpu_check.py runs it on CPU in `make test`).
# On a GPU machine with no registry and no .venv it runs on the machine's python3 with the
# wheels `make gpu-bundle` put in .whl/ here (carry .whl with the tree); elsewhere, in .venv.
GPU_OUT ?= out/gpu-check
gpu-check:  ## dpviz on CUDA end to end (NCCL, gloo on GPU tensors, the CUDA allocator) → $(GPU_OUT)/gpu-check.{json,txt}; CPU equivalents without CUDA
	@if [ ! -x $(PY) ] && [ -d .whl ] && python3 -c "import torch" 2>/dev/null; then \
	  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/dpviz-site .whl/*.whl && \
	  PYTHONPATH=/tmp/dpviz-site python3 scripts/gpu_check.py --out $(GPU_OUT); \
	else { [ -f $(STAMP) ] || bash scripts/setup.sh; } && $(PY) scripts/gpu_check.py --out $(GPU_OUT); fi

gpu-bundle:  ## the Python 3.12 wheels the GPU machine lacks → .whl/ (git-ignored), for gpu-check there
	bash scripts/gpu_bundle.sh

versions:  ## the suite under other torch and Python versions, one venv each (multi-GB CUDA builds: not CI)
	bash scripts/check_versions.sh

animations: $(STAMP)  ## render every scene from fresh live runs into out/animations/
	$(PY) -m dpviz animate all --out out/animations

clean:
	rm -rf out .pytest_cache node_modules
