#!/usr/bin/env bash
# Fetch, on a machine with the package registry, the small wheels that a CUDA test machine
# may lack (it brings torch with CUDA, onnx and onnxruntime, and nothing can be downloaded
# there). They go to .gpu-wheels/ (git-ignored), which scripts/gpu_check.sh installs from.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-wheels
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 -d .gpu-wheels \
    pluggy attrs cattrs structlog tabulate typing_extensions exceptiongroup \
    torchao onnxscript onnx_ir ml_dtypes pytest iniconfig packaging setuptools wheel
du -sh .gpu-wheels
