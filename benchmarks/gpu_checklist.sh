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
step gpu-tests 75 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_device.py tests/test_stacked.py \
  tests/test_graphed.py tests/test_batched_estimators.py tests/test_batches.py tests/test_server_opt.py \
  tests/test_robust_aggregation.py
# issue 49: the stacked step beside the raw floor, 10,000 clients a round, the paper-scale grids' GPU time
step floor-2nn 100 python3 benchmarks/gpu_floor.py --models 2nn --batches 10,50 --ks 100,1000
step floor-svm 50 python3 benchmarks/gpu_floor.py --models svm --ks 100,1000
step floor-cnn 60 python3 benchmarks/gpu_floor.py --models cnn --ks 100
step scale 80 python3 benchmarks/scale.py --device cuda --runtimes stacked --models 2nn --clients 100,1000,10000 \
  --stored-at ""
step paper-estimate 130 python3 benchmarks/paper_estimate.py --device cuda --grids svm_case2,svm_cases,fig3_alpha,cnn_case2
step paper-estimate-arms 150 python3 benchmarks/paper_estimate.py --device cuda --stack-arms --grids fig3_alpha,svm_cases,svm_case2
step recipes 110 python3 benchmarks/gpu_recipes.py --rounds 3 --cnn-rounds 4 --runtimes in-process,stacked --composed
step stacked-cuda 60 python3 benchmarks/stacked.py --device cuda --ks 10,100 --seeds 0 --repeats 2
if [ "${SUITE:-1}" = 1 ] && [ $(( ${DEADLINE:-600} - SECONDS )) -gt 60 ]; then
  step suite "$(( ${DEADLINE:-600} - SECONDS ))" python3 -m pytest -q -p no:cacheprovider -n 14
fi
grep -E "^===|passed|failed|error|differ|DIFFERS|peak|s/round|speed-up|K=|^\||estimate" "$LOG" | tail -150
