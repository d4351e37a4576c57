#!/usr/bin/env bash
# The GPU path run for real (issue 37), on one machine with one NVIDIA GPU, in at most GPU_CHECK_BUDGET_S
# seconds (470: under 8 minutes), everything written under $OUT (logs/, JSONs, summary.md). docs/gpu.md
# says what each step measures and where its figures go.
#
#   OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh     # on the GPU machine (the device tool sets OUT)
#   bash benchmarks/gpu_check.sh --dry-run              # anywhere: print each step, run nothing
#   GPU_CHECK_SKIP_INSTALL=1 GPU_VENV=VENV ...           # use VENV as it is (a rerun; a preinstalled env)
#
# Each step runs under its own `timeout`, cut to what is left of the budget, so one hang costs only its
# own time; a step that fails is recorded and the next one runs. A step whose minimum no longer fits is
# skipped and said so. Steps that need a GPU are skipped once `check-cuda` has found no CUDA torch, the
# TensorRT ones once `check-tensorrt` has found no TensorRT.
# pi05:full comes last: it runs only if time is left. Exit 1 when a step failed or timed out.
#
# Where torch with CUDA comes from: the package registry's default `torch` wheel for Linux x86_64 is a
# CUDA build (torch 2.13.0's is built for CUDA 13). The CPU machines install the `+cpu` wheel of the same
# release from a local wheel folder; `torch===VERSION` (exact string match, PEP 440) refuses that local
# `+cpu` label, so a GPU machine that has such a folder still gets the registry's CUDA build.
# TensorRT: the `tensorrt` Python package is the only NVIDIA library the code imports
# (hotloop.compile.backends.tensorrt), for CUDA 13 like torch, and below 11: TensorRT 11 removed the
# BuilderFlag.BF16 the backend sets for its bf16 plans. torch-tensorrt and ModelOpt are not imported anywhere.
set -uo pipefail # not -e: a failed step is recorded and the next one runs
cd "$(dirname "$0")/.." || exit 2

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
}

DRY_RUN=0
case "${1:-}" in
  "") ;;
  --dry-run) DRY_RUN=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "error: unknown argument '$1'; use --dry-run or no argument" >&2
    exit 2
    ;;
esac

BUDGET_S=${GPU_CHECK_BUDGET_S:-470}
if ! [[ $BUDGET_S =~ ^[0-9]+$ ]] || ((BUDGET_S < 60)); then
  echo "error: GPU_CHECK_BUDGET_S='$BUDGET_S' must be a whole number of seconds >= 60 (default 470)" >&2
  exit 2
fi
OUT=${OUT:-}
if [[ -z $OUT ]]; then
  if ((DRY_RUN)); then
    OUT=/tmp/gpu-check-out # only printed
  else
    echo "error: OUT is not set; set OUT to the folder for logs and figures, e.g. OUT=/tmp/gpu-check" >&2
    exit 2
  fi
fi
PY=${PYTHON:-python3}
# Outside the repository and $OUT: several GB of CUDA wheels must not travel back with the figures.
VENV=${GPU_VENV:-/tmp/hotloop-gpu-venv}
VPY=$VENV/bin/python
HL=$VENV/bin/hotloop
SKIP_INSTALL=${GPU_CHECK_SKIP_INSTALL:-0}
if [[ $SKIP_INSTALL != 0 && $SKIP_INSTALL != 1 ]]; then
  echo "error: GPU_CHECK_SKIP_INSTALL='$SKIP_INSTALL' must be 0 or 1" >&2
  exit 2
fi
if ((SKIP_INSTALL && !DRY_RUN)) && [[ ! -x $VPY ]]; then
  echo "error: GPU_CHECK_SKIP_INSTALL=1 but GPU_VENV='$VENV' has no bin/python; drop it to install there" >&2
  exit 2
fi
LOCK=requirements-lock.txt
TORCH_VERSION=$(sed -n 's/^torch==//p' "$LOCK")
if [[ -z $TORCH_VERSION ]]; then
  echo "error: $LOCK pins no torch==VERSION; regenerate it with make lock" >&2
  exit 2
fi
TENSORRT_REQ='tensorrt-cu13>=10.13,<11'
# What the Makefile's `make install` installs, with the CUDA torch and TensorRT installed first.
EXTRAS='.[backends,tokenizer,serve,lerobot,compress,dev,sims,cluster]'
# The GPU test tier: every test file with a test marked `gpu` (they skip for want of CUDA elsewhere).
mapfile -t GPU_TESTS < <(grep -rlE 'pytest\.mark\.gpu' tests | sort)
if ((${#GPU_TESTS[@]} == 0)); then
  echo "error: no test under tests/ is marked gpu; run this from a hotloop checkout" >&2
  exit 2
fi
ART=$OUT/artifacts
LOGS=$OUT/logs

START=$(date +%s)
CUDA_OK=1 # cleared by a failed check-cuda: later GPU steps are skipped, not run to fail
TENSORRT_OK=1 # likewise for check-tensorrt and the TensorRT steps
FAILED=0

if ((DRY_RUN)); then
  echo "gpu_check dry run: budget ${BUDGET_S} s, OUT=$OUT, venv $VENV, torch===$TORCH_VERSION (CUDA build)"
else
  if ! mkdir -p "$LOGS" "$ART" 2>/dev/null || ! [[ -w $OUT ]]; then
    echo "error: OUT='$OUT' cannot be written; set OUT to a writable folder" >&2
    exit 2
  fi
  printf 'step\tstatus\trc\twall_s\ttimeout_s\n' >"$OUT/steps.tsv"
  echo "gpu_check: budget ${BUDGET_S} s, OUT=$OUT, venv $VENV, torch===$TORCH_VERSION (CUDA build)"
fi

# step NAME TIMEOUT_S MIN_S NEEDS CMD...: run CMD under `timeout` (TIMEOUT_S, or what is left of the budget
# when less), its output in $LOGS/NAME.log; skipped when less than MIN_S is left, or, with NEEDS=cuda, when
# check-cuda failed (NEEDS=tensorrt: or check-tensorrt).
step() {
  local name=$1 limit=$2 min=$3 needs=$4
  shift 4
  if ((DRY_RUN)); then
    local quoted
    quoted=$(printf '%q ' "$@")
    printf 'step %s (timeout %s s, min %s s): %s\n' "$name" "$limit" "$min" "${quoted% }"
    return 0
  fi
  local now left
  now=$(date +%s)
  left=$((BUDGET_S - (now - START)))
  if [[ $needs != - ]] && ((!CUDA_OK)); then
    _record "$name" "skipped: no CUDA torch (see logs/check-cuda.log)" - 0 "$limit"
    return 0
  fi
  if [[ $needs == tensorrt ]] && ((!TENSORRT_OK)); then
    _record "$name" "skipped: no TensorRT (see logs/check-tensorrt.log)" - 0 "$limit"
    return 0
  fi
  if ((left < min)); then
    _record "$name" "skipped: ${left} s of the budget left, needs ${min} s" - 0 "$limit"
    return 0
  fi
  local t=$((limit < left ? limit : left))
  local t0 t1 rc status
  t0=$(date +%s%N)
  timeout -k 10 "$t" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${t} s" ;;
    *) status=failed ;;
  esac
  _record "$name" "$status" "$rc" "$(((t1 - t0) / 1000000))" "$t"
  if ((rc != 0)); then
    FAILED=1
    tail -n 15 "$LOGS/$name.log" | sed 's/^/    | /'
  fi
  return "$rc"
}

# install_step NAME TIMEOUT_S MIN_S NEEDS CMD...: a step, or with GPU_CHECK_SKIP_INSTALL=1 a skipped one.
install_step() {
  if ((SKIP_INSTALL && !DRY_RUN)); then
    _record "$1" "skipped: GPU_CHECK_SKIP_INSTALL=1 (using $VENV as it is)" - 0 "$2"
  else
    step "$@"
  fi
}

_record() { # NAME STATUS RC WALL_MS TIMEOUT_S
  local wall
  wall=$(awk -v ms="$4" 'BEGIN { printf "%.1f", ms / 1000 }')
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$wall" "$5" >>"$OUT/steps.tsv"
  printf '[%4d s] %-22s %s (rc %s, %s s)\n' "$(($(date +%s) - START))" "$1" "$2" "$3" "$wall"
}

# ---- the machine and the install --------------------------------------------------------------------
step gpu-info 20 5 - nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
step python-version 10 5 - "$PY" --version
install_step install-venv 60 20 - "$PY" -m venv "$VENV"
install_step install-pip 60 20 - "$VPY" -m pip install -q -c "$LOCK" pip
install_step install-torch-cuda 240 60 - "$VPY" -m pip install -q -c "$LOCK" "torch===$TORCH_VERSION"
install_step install-tensorrt 150 30 - "$VPY" -m pip install -q "$TENSORRT_REQ"
install_step install-hotloop 150 30 - "$VPY" -m pip install -q -c "$LOCK" -e "$EXTRAS"
step check-cuda 60 10 - "$VPY" -c 'import sys, torch; ok = torch.cuda.is_available(); print("torch", torch.__version__, "cuda", torch.version.cuda, "device", ok and torch.cuda.get_device_name(0)); sys.exit(0 if ok else "torch sees no CUDA GPU: a CPU build, or a driver older than its CUDA")' || CUDA_OK=0
step check-tensorrt 60 10 - "$VPY" -c 'import tensorrt; print("tensorrt", tensorrt.__version__)' || TENSORRT_OK=0

# ---- the GPU test tier and doctor ---------------------------------------------------------------------
step tests-gpu 150 30 cuda "$VPY" -m pytest -q -p no:cacheprovider -n 0 -m gpu -rs \
  --junitxml "$OUT/tests-gpu.xml" "${GPU_TESTS[@]}"
step doctor 90 20 - "$HL" doctor --json "$OUT/doctor.json" --roofline-cache "$OUT/roofline"

# ---- pi05:small eager on the GPU: host and device time per stage, fp32 and bf16 ---------------------------
for dtype in float32 bfloat16; do
  step "bench-small-$dtype" 90 30 cuda "$HL" bench pi05:small --device cuda --dtype "$dtype" \
    --warmup 10 --iters 100 --quiet --json "$OUT/bench-small-cuda-$dtype.json"
done
# CUDA Graphs off vs on (the denoise loop as Engine.load captures it; no hotloop command shows this).
step graphs-small-bfloat16 90 30 cuda "$VPY" benchmarks/gpu_cuda_graph.py --target pi05:small \
  --dtype bfloat16 --device cuda --iters 100 --json "$OUT/graphs-small-bfloat16.json"

# ---- pi05:small compiled: TensorRT alone, then the planner's choice among eager, inductor, TensorRT ----------
# Precisions are fp32 and bf16: the planner has no fp16 or fp8 (hotloop.compile.backends.PRECISION_NAMES).
# --force: the load is recorded rather than refused; --no-cache: every candidate timed afresh.
step compile-small-tensorrt 200 60 tensorrt "$HL" compile pi05:small --backends tensorrt --precisions fp32,bf16 \
  --variants plain --force --no-cache -o "$ART/pi05-small-tensorrt" \
  --json "$OUT/compile-small-tensorrt.json"
step bench-small-tensorrt 90 30 tensorrt "$HL" bench "$ART/pi05-small-tensorrt" --warmup 10 --iters 100 --quiet \
  --json "$OUT/bench-small-tensorrt.json"
step compile-small-best 240 90 cuda "$HL" compile pi05:small --backends eager,inductor,tensorrt \
  --precisions fp32,bf16 --force --no-cache -o "$ART/pi05-small-best" \
  --json "$OUT/compile-small-best.json"
step bench-small-best 90 30 cuda "$HL" bench "$ART/pi05-small-best" --warmup 10 --iters 100 --quiet \
  --json "$OUT/bench-small-best.json"

# ---- pi05:full, if time is left: eager bf16 at 3 and 1 views, then its TensorRT bf16 plan -------------------
for views in 3 1; do
  step "bench-full-bfloat16-${views}view" 120 60 cuda "$HL" bench pi05:full --device cuda --dtype bfloat16 \
    --views "$views" --warmup 5 --iters 30 --quiet --json "$OUT/bench-full-cuda-bfloat16-${views}view.json"
done
step compile-full-tensorrt 300 150 tensorrt "$HL" compile pi05:full --backends tensorrt --precisions bf16 \
  --variants plain --force --no-cache --iters 10 -o "$ART/pi05-full-tensorrt" \
  --json "$OUT/compile-full-tensorrt.json"
step bench-full-tensorrt 90 45 tensorrt "$HL" bench "$ART/pi05-full-tensorrt" --warmup 5 --iters 30 --quiet \
  --json "$OUT/bench-full-tensorrt.json"

if ((DRY_RUN)); then
  echo "summary: $PY benchmarks/gpu_check_summary.py $OUT (writes $OUT/summary.md)"
  exit 0
fi
# The figures of every JSON above in one table (the engine artifacts stay out: only logs and figures).
summary_py=$VPY
[[ -x $summary_py ]] || summary_py=$PY
"$summary_py" benchmarks/gpu_check_summary.py "$OUT" || FAILED=1
# The plans (hundreds of MB) stay behind; their manifests and the JSONs above hold what they were.
for manifest in "$ART"/*/manifest.json; do
  [[ -f $manifest ]] && cp "$manifest" "$OUT/manifest-$(basename "$(dirname "$manifest")").json"
done
rm -rf "$ART"
[[ -f $OUT/summary.md ]] && cat "$OUT/summary.md"
exit "$FAILED"
