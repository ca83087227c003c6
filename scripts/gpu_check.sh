#!/usr/bin/env bash
# One prepared run on a CUDA machine that already has torch with CUDA, onnx and onnxruntime
# (an H200-class GPU, no network): it installs aitune and its plugins from this checkout,
# takes the missing pure-Python dependencies from .gpu-wheels/ (scripts/gpu_wheels.sh),
# runs every GPU-marked test and tunes each bundled model on CUDA. About 5-8 minutes.
#
#   scripts/gpu_check.sh [WHEELS_DIR]        results also go to $OUT (default gpu-check/)
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.gpu-wheels}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
status=0

python3 -m venv --system-site-packages .gpu-venv
# shellcheck disable=SC1091
. .gpu-venv/bin/activate
python -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps \
    pluggy attrs cattrs structlog tabulate torchao onnxscript onnx_ir ml_dtypes pytest iniconfig 2>&1 | tail -3
python -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps --no-build-isolation \
    . ./plugins/aitune_inductor ./plugins/aitune_torchao ./plugins/aitune_onnx ./plugins/aitune_trt 2>&1 | tail -3

python - <<'PY' | tee "$OUT/environment.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability())
PY
aitune plugins --candidates --device cuda | tee "$OUT/plugins.txt"

run() {  # run NAME COMMAND...: keep going on failure, remember it
    echo "== $1"
    shift
    if ! timeout 300 "$@" 2>&1 | tee -a "$OUT/log.txt"; then status=1; fi
}
export AITUNE_CACHE_DIR="$PWD/$OUT/cache" TORCHINDUCTOR_CACHE_DIR="$PWD/$OUT/inductor-cache"
run "core GPU tests" python -m pytest -q -p no:cacheprovider -m gpu tests -rs
for plugin in aitune_inductor aitune_torchao aitune_onnx aitune_trt; do
    run "$plugin GPU tests" python -m pytest -q -p no:cacheprovider --import-mode=importlib -m gpu "plugins/$plugin" -rs
done
for model in mlp cnn transformer; do
    run "demo $model on CUDA" env AITUNE_LOG_LEVEL=warning aitune demo --model "$model" --device cuda \
        --batch-sizes 1,8,32,128
done
echo "gpu_check: $([ $status -eq 0 ] && echo all passed || echo some steps failed), see $OUT/log.txt"
exit $status
