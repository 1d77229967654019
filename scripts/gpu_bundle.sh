#!/usr/bin/env bash
# `make gpu-bundle`: into .whl/ (git-ignored), the wheels for Python 3.12 on x86-64 Linux of what
# dpviz imports and the GPU machines lack (shared/ENVIRONMENT.md: they have torch, numpy,
# matplotlib, tqdm, pygments, typing_extensions, and no package registry). Only the working
# tree travels there, so the wheels go with it; `make gpu-check` (or the one line in the README)
# installs them there without an index. The versions are those the CPU set-up tested.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
  msgspec==0.22.0 isal==1.9.1                                   # dpviz's own dependencies
  ipywidgets==8.1.9 comm==0.2.3 traitlets==5.16.1 widgetsnbextension==4.0.16
  jupyterlab_widgets==3.0.17                                    # the cap slider's widgets
  ipython==9.18.1 ipython_pygments_lexers==1.1.1 decorator==5.3.1 jedi==0.20.1 parso==0.8.7
  matplotlib-inline==0.2.2 pexpect==4.9.0 ptyprocess==0.7.0 prompt_toolkit==3.0.53
  wcwidth==0.9.4 stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure_eval==0.2.4
)                                                               # ipywidgets needs IPython
PLATFORMS=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${p}_x86_64")
done
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "${WHEELS[@]}"
echo "== .whl: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1); on the GPU machine:"
echo "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site python3 scripts/gpu_check.py --out \$OUT"
