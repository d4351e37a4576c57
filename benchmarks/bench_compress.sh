#!/usr/bin/env bash
# Compression recipes on demo:conveyor and pi05:small (issue 9): run with the machine otherwise idle.
#   benchmarks/bench_compress.sh [OUT] [EPISODES]
set -euo pipefail
OUT=${1:-bench-compress}
EPISODES=${2:-100}
HL=(env PYTHONPATH=src MUJOCO_GL=egl .venv/bin/python -m hotloop)
mkdir -p "$OUT"
# The ladder: fewer steps -> quantization -> compile, success per step at a fixed 0 ms simulated latency.
"${HL[@]}" compress demo:conveyor --recipe steps:4,quantize,compile --episodes "$EPISODES" --bench-iters 100 \
  -o "$OUT/conveyor-art" --json "$OUT/conveyor.json" --plot "$OUT/conveyor.png" --quiet || true
"${HL[@]}" eval "$OUT/conveyor-art" --episodes "$EPISODES" --latency fixed:0 --json "$OUT/conveyor-eval.json"
"${HL[@]}" eval demo:conveyor --episodes "$EPISODES" --latency fixed:0 --json "$OUT/conveyor-ref-eval.json"
"${HL[@]}" bench "$OUT/conveyor-art" --compare demo:conveyor --iters 200 --json "$OUT/conveyor-bench.json"
# Fewer steps alone and step distillation (10 -> 4).
for n in 5 3 2 1; do
  "${HL[@]}" eval demo:conveyor --episodes "$EPISODES" --latency fixed:0 --steps "$n" --json "$OUT/conveyor-steps$n.json"
done
# pi05:small: pruning + distillation toward the teacher, 10 -> 5 steps distilled, int8, compiled (issue 9's 8x
# target; docs/compress-small.md): calibrated and distilled on recorded frames, judged on held-out ones.
"${HL[@]}" record --task conveyor-pick --episodes 40 --seed 500 -o "$OUT/calib-small" --quiet
"${HL[@]}" compress pi05:small --recipe prune:0.75:0.5,distill,step-distill:5,quantize,compile \
  --data "$OUT/calib-small" --tolerance cos:0.99 --calibration-frames 128 --eval-observations 16 \
  --distill-steps 100 --distill-lr 3e-5 --backends eager,openvino --threads 2 --bench-iters 10 --buckets 32 \
  -o "$OUT/small-art" --json "$OUT/small.json" --plot "$OUT/small.png" || true
"${HL[@]}" bench "$OUT/small-art" --compare pi05:small --prompt-tokens 20 --threads 2 --iters 60 \
  --json "$OUT/small-bench.json"
env PYTHONPATH=src .venv/bin/python benchmarks/compressed_agreement.py "$OUT/small-art" --observations 16
