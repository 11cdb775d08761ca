#!/usr/bin/env bash
# The GPU checklist (../shared/gpu-checklist.md) as one command, for a CUDA machine with python3, torch and
# the test packages but no network: Fashion-MNIST's .gz files in .data/fashion-mnist/ (copied there first).
# Each step has its own time limit (the suite: what is left of DEADLINE seconds, default 600); everything goes to $OUT/checklist.log (default /tmp/gpu-checklist).
#     bash benchmarks/gpu_checklist.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD FEDACCEL_DATA_FASHION_MNIST=$PWD/.data/fashion-mnist MPLBACKEND=Agg
# the tests that clear FEDACCEL_DATA_* look for the embedded copy where the Debian package puts it
export FEDACCEL_FASHION_MNIST_DIR=$PWD/.data/fashion-mnist
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0
LOG=$OUT/checklist.log
step() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "=== $name (limit $limit s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name: exit $? after $((SECONDS - start)) s" | tee -a "$LOG"
}
python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 || echo "pip install -e . failed" | tee -a "$LOG"
step gpu 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"'
step gpu-tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_device.py tests/test_stacked.py \
  tests/test_batched_estimators.py tests/test_batches.py tests/test_server_opt.py tests/test_robust_aggregation.py
step recipes 200 python3 benchmarks/gpu_recipes.py --rounds 3 --cnn-rounds 5 --runtimes in-process,stacked --composed
step stacked-cuda 120 python3 benchmarks/stacked.py --device cuda --ks 10,100 --seeds 0 --repeats 2
step stacked-cpu 50 python3 benchmarks/stacked.py --device cpu --models svm,2nn --ks 10,100 --seeds 0 --repeats 1
step suite "${SUITE_LIMIT:-$(( ${DEADLINE:-600} - SECONDS ))}" python3 -m pytest -q -p no:cacheprovider -n 14
grep -E "^===|passed|failed|error|differ|DIFFERS|peak|s/round|speed-up|K=" "$LOG" | tail -80
