#!/usr/bin/env bash
# Builds .whl/ (gitignored) for benchmarks/gpu_check.py on the lent GPU machine: the packages its image
# lacks (TRL, math-verify and their pure-Python needs; torch, transformers, accelerate, pyarrow, pandas,
# xxhash, sympy ... are there: the device notes list its packages) at the versions of the environment
# that runs this script, as wheels for CPython 3.12 on x86-64 (the device's python3). Pure Python
# only: the whole wheelhouse travels with the working tree (64 MiB limit; ~3 MB here).
#   PYTHON=.venv/bin/python bash benchmarks/gpu/build_wheelhouse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
PACKAGES="trl datasets dill multiprocess math-verify latex2sympy2_extended antlr4-python3-runtime"
rm -rf .whl
mkdir -p .whl
for pkg in $PACKAGES; do
  version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg")
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$pkg==$version"
done
ls -l .whl
du -sh .whl
