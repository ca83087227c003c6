#!/usr/bin/env bash
# Runs aitune-trt's TensorRT tests and a short tune on a machine with TensorRT and a CUDA GPU.
#
# Usage, from anywhere in the checkout:
#   bash plugins/aitune_trt/scripts/gpu_check.sh            # a venv on top of the machine's torch
#   AITUNE_GPU_PYTHON=python3 bash plugins/aitune_trt/scripts/gpu_check.sh   # use this python as it is
#
# torch and tensorrt are never installed by this script: it uses the machine's own
# (a venv made with --system-site-packages sees them), and installs aitune-core,
# aitune-onnx and aitune-trt from the checkout with --no-deps for the three packages, so
# pip cannot swap the machine's CUDA torch for another build. Missing light
# dependencies (attrs, cattrs, onnx, ...) are installed from the registry; onnxruntime is
# left out on purpose (the TensorRT backend does not use it, and a CPU onnxruntime next
# to the machine's onnxruntime-gpu would break both).
# Exit status: 0 when every gpu test passed, non-zero otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
VENV="${AITUNE_GPU_VENV:-$ROOT/.venv-gpu-check}"

if [[ -n "${AITUNE_GPU_PYTHON:-}" ]]; then
    PY="$AITUNE_GPU_PYTHON"
    echo "== using $PY as it is"
else
    if [[ ! -x "$VENV/bin/python" ]]; then
        echo "== creating $VENV (with the system's site-packages, for its torch and tensorrt)"
        python3 -m venv --system-site-packages "$VENV"
    fi
    PY="$VENV/bin/python"
fi

echo "== what this machine has"
"$PY" - <<'EOF'
import importlib.util, sys
import torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
if importlib.util.find_spec("tensorrt") is None:
    sys.exit("tensorrt is not installed: pip install tensorrt-cu12 (or -cu13) matching this CUDA, then rerun")
import tensorrt
print("tensorrt", tensorrt.__version__)
if not torch.cuda.is_available():
    sys.exit("no CUDA device")
EOF

echo "== installing aitune-core, aitune-onnx and aitune-trt from $ROOT (no torch, no tensorrt)"
"$PY" -m pip install --quiet "attrs>=23.1" "cattrs>=23.2" "pluggy>=1.5" "structlog>=24.1" "tabulate>=0.9" \
    "numpy>=1.24" "onnx>=1.16" "onnxscript>=0.2" "pytest>=8"
"$PY" -m pip install --quiet --no-deps --force-reinstall "$ROOT" "$ROOT/plugins/aitune_onnx" "$ROOT/plugins/aitune_trt"

echo "== aitune plugins"
"$PY" -m aitune_core.cli plugins

echo "== pytest -m gpu plugins/aitune_trt"
status=0
"$PY" -m pytest -m gpu -v -rs -p no:cacheprovider --import-mode=importlib -s plugins/aitune_trt || status=$?

echo "== a short tune of a small model with the default candidates"
"$PY" - <<'EOF' || status=$?
import torch
import aitune_core as ait

model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)
).eval().cuda()
model = ait.Module(model, "mlp")
report = ait.tune(model, [torch.randn(64) for _ in range(64)], batch_sizes=[1, 8, 32], device="cuda")
print(report)
(graph,) = report.graphs
tensorrt = [c for c in graph.candidates if c.backend.startswith("TensorRTBackend")]
print("TensorRT candidate:", [(c.backend, c.status, c.reason) for c in tensorrt])
x = torch.randn(16, 64, device="cuda")
with torch.no_grad():
    torch.testing.assert_close(model(x), model.module(x), rtol=1e-3, atol=1e-4)
if not tensorrt or tensorrt[0].status not in ("selected", "passed"):
    raise SystemExit("TensorRT was not built and validated by the default strategy")
print("tune: TensorRT built, validated and", tensorrt[0].status)
EOF

echo "== done: gpu tests and tune exit status $status"
exit "$status"
